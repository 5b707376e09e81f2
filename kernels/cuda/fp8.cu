// FP8 (E4M3) weights, weight-only (W8A16): the weight w[n,k] = q[n,k]·s(n,k)
// with q an E4M3 byte and s a scale (F32, F16 or BF16; code sdt as in
// load_as_f32) per output row (block == 0: scale[n]) or per block×block tile
// (scale[(n/block)·sstride + k/block], sstride = ⌈K/block⌉). Activations stay
// bf16; products accumulate in fp32.
//
// E4M3 is widened without the sm_89 conversion instructions (these kernels
// compile for any GPU): the byte's exponent and mantissa bits, shifted into
// place, are an IEEE binary16 value 2^-8 times the E4M3 one (subnormals
// included: binary16 has a wider exponent range), widened by cvt.f32.f16;
// the 2^8 is applied once per sum. The E4M3 NaN (S.1111.111) is not
// special-cased: it reads as ±480; checkpoints hold none.

// e4m3_f widens an E4M3 byte to fp32, divided by 256.
__device__ __forceinline__ float e4m3_f(unsigned b) {
	return h2f((f16_t)(((b & 0x80u) << 8) | ((b & 0x7fu) << 7)));
}

// dot4_e4m3 is Σ q_j·x_j over the four E4M3 bytes of w (low byte first) and
// the four bf16 values of xa (elements 0, 1) and xb (2, 3), divided by 256.
__device__ __forceinline__ float dot4_e4m3(unsigned w, unsigned xa, unsigned xb) {
	float s = e4m3_f(w & 0xffu) * bf2f((bf16_t)(xa & 0xffffu));
	s = fmaf(e4m3_f((w >> 8) & 0xffu), bf2f((bf16_t)(xa >> 16)), s);
	s = fmaf(e4m3_f((w >> 16) & 0xffu), bf2f((bf16_t)(xb & 0xffffu)), s);
	return fmaf(e4m3_f(w >> 24), bf2f((bf16_t)(xb >> 16)), s);
}

// dot16_e4m3 is Σ q_j·x_j over 16 E4M3 bytes (w) and 16 bf16 values (x0 the
// first eight, x1 the next), divided by 256.
__device__ __forceinline__ float dot16_e4m3(uint4 w, uint4 x0, uint4 x1) {
	return dot4_e4m3(w.x, x0.x, x0.y) + dot4_e4m3(w.y, x0.z, x0.w) + dot4_e4m3(w.z, x1.x, x1.y) + dot4_e4m3(w.w, x1.z, x1.w);
}

// gemv_fp8: y[n] = Σ_k x[k]·q[n,k]·s(n,k) for one input row x[K] (bf16),
// y bf16 (out_f32 0) or fp32 (out_f32 1), or y[n] += that sum, y fp32
// (out_f32 2, the sum rounded as add_f32's). K % 16 == 0, x and w 16-byte
// aligned, block 0 or a multiple of 16 (a 16-byte stretch of a row lies in
// one block). Persistent warps, one row each at a time, four 16-byte weight
// loads in flight per lane.
extern "C" __global__ void __launch_bounds__(256) gemv_fp8(void* y, int out_f32, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w, const void* __restrict__ scale, int sdt, int N, int K, int block, int sstride) {
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int nv = K >> 4;
	const uint4* xv = reinterpret_cast<const uint4*>(x);
	for (int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5; row < N; row += nw) {
		const uint4* wr = reinterpret_cast<const uint4*>(w + (usize)row * K);
		const usize srow = block ? (usize)(row / block) * sstride : 0;
		float acc = 0.f;
		int i = lane;
		for (; i + 32 * 3 < nv; i += 32 * 4) {
			uint4 a[4], b0[4], b1[4];
#pragma unroll
			for (int u = 0; u < 4; u++) {
				const int c = i + 32 * u;
				a[u] = __ldg(wr + c);
				b0[u] = __ldg(xv + 2 * c);
				b1[u] = __ldg(xv + 2 * c + 1);
			}
#pragma unroll
			for (int u = 0; u < 4; u++) {
				const float d = dot16_e4m3(a[u], b0[u], b1[u]);
				acc += block ? d * load_as_f32(scale, sdt, srow + (usize)((i + 32 * u) * 16 / block)) : d;
			}
		}
		for (; i < nv; i += 32) {
			const float d = dot16_e4m3(__ldg(wr + i), __ldg(xv + 2 * i), __ldg(xv + 2 * i + 1));
			acc += block ? d * load_as_f32(scale, sdt, srow + (usize)(i * 16 / block)) : d;
		}
		acc = warp_sum(acc) * 256.f;
		if (!block) acc *= load_as_f32(scale, sdt, row);
		if (lane == 0) {
			if (out_f32 == 2) ((float*)y)[row] = __fadd_rn(((float*)y)[row], acc);
			else if (out_f32) ((float*)y)[row] = acc;
			else ((bf16_t*)y)[row] = f2bf(acc);
		}
	}
}

// dequant_fp8_bf16: out[n,k] = bf16(q[n,k]·s(n,k)) for the N×K weight (any
// K, any block), grid-stride; the prefill path multiplies the result with
// cuBLAS.
extern "C" __global__ void __launch_bounds__(256) dequant_fp8_bf16(bf16_t* out, const unsigned char* __restrict__ w,
		const void* __restrict__ scale, int sdt, int N, int K, int block, int sstride) {
	const usize total = (usize)N * K;
	for (usize i = (usize)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (usize)gridDim.x * blockDim.x) {
		const int n = (int)(i / K), k = (int)(i % K);
		const float s = block ? load_as_f32(scale, sdt, (usize)(n / block) * sstride + k / block) : load_as_f32(scale, sdt, n);
		out[i] = f2bf(e4m3_f(w[i]) * 256.f * s);
	}
}
