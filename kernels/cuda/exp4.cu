// exp4_unpack decodes a buffer packed by kernels/exp4 into n 16-bit words:
// out[i] = (lo[i] & 0x80) << 8 | e << 7 | (lo[i] & 0x7F) with e = base[c]
// + code[i] (c = i / 4096), or for an escape (code 15) the exponent its
// entry gives. One block a chunk of 4096 words, 256 threads, 16 words a
// thread (16 lo bytes and 8 code bytes in, 32 bytes out); then the
// chunk's escapes, after a block barrier, overwrite their words. The
// offsets are the Layout's (16-byte aligned sections); out 16-byte aligned.
extern "C" __global__ void __launch_bounds__(256) exp4_unpack(unsigned short* out, const unsigned char* p, long long n,
		long long loOff, long long codesOff, long long baseOff, long long escStartOff, long long escOff) {
	const long long c = blockIdx.x;
	const long long w0 = c * 4096 + threadIdx.x * 16;
	const unsigned char* lo = p + loOff;
	const unsigned char* codes = p + codesOff;
	const unsigned base = p[baseOff + c];
	if (w0 + 16 <= n) {
		const uint4 l = *reinterpret_cast<const uint4*>(lo + w0);
		const uint2 k = *reinterpret_cast<const uint2*>(codes + w0 / 2);
		const unsigned lw[4] = {l.x, l.y, l.z, l.w}, kw[2] = {k.x, k.y};
		unsigned o[8];
#pragma unroll
		for (int j = 0; j < 8; j++) {  // words 2j and 2j+1 of the thread's 16
			const unsigned lb = lw[j / 2] >> (16 * (j & 1)), kb = kw[j / 4] >> (8 * (j & 3));
			const unsigned a0 = lb & 0xFF, a1 = (lb >> 8) & 0xFF;
			const unsigned e0 = (base + (kb & 0xF)) & 0xFF, e1 = (base + ((kb >> 4) & 0xF)) & 0xFF;
			o[j] = ((a0 & 0x80) << 8 | e0 << 7 | (a0 & 0x7F)) | ((a1 & 0x80) << 8 | e1 << 7 | (a1 & 0x7F)) << 16;
		}
		uint4* dst = reinterpret_cast<uint4*>(out + w0);
		dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
		dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
	} else {
		for (long long i = w0; i < n && i < w0 + 16; i++) {
			const unsigned a = lo[i], e = (base + ((codes[i / 2] >> (4 * (i & 1))) & 0xF)) & 0xFF;
			out[i] = (unsigned short)((a & 0x80) << 8 | e << 7 | (a & 0x7F));
		}
	}
	__syncthreads();  // the chunk's words are written: escapes replace some
	const unsigned* starts = reinterpret_cast<const unsigned*>(p + escStartOff);
	const unsigned* esc = reinterpret_cast<const unsigned*>(p + escOff);
	for (unsigned j = starts[c] + threadIdx.x; j < starts[c + 1]; j += 256) {
		const unsigned ent = esc[j];
		const long long i = c * 4096 + (ent & 0xFFFF);
		if (i < n) {
			const unsigned a = lo[i];
			out[i] = (unsigned short)((a & 0x80) << 8 | ((ent >> 16) & 0xFF) << 7 | (a & 0x7F));
		}
	}
}
