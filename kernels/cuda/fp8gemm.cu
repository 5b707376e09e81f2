// FP8 tensor-core GEMMs (W8A8) for prefills with per-channel FP8 weights:
// quant_rows_e4m3 quantizes the activations per token (one scale per row),
// cuBLASLt multiplies the E4M3 codes of activations and weights with fp32
// accumulation (runtime/cuda BLAS.GemmFP8, no scales), and fp8_rescale
// multiplies each result by its token's and its output channel's scale —
// or, on sm_90 with cuBLASLt 12.9+, cuBLASLt applies both scales itself
// (BLAS.GemmFP8Scaled; quant_rows_e4m3 then also converts the weights'
// scales to fp32).

// f2e4m3 narrows to E4M3 with round-to-nearest-even, saturating at ±448
// (code 0x7e); NaN becomes 0x7f. Bit for bit runtime.F32ToF8E4M3 (written
// out: the path before sm_89 and for NaN, and the reference the hardware
// conversion of f2e4m3x8 equals).
__device__ __forceinline__ unsigned f2e4m3(float f) {
	const unsigned u = __float_as_uint(f);
	const unsigned sign = (u >> 24) & 0x80u;
	const unsigned a = u & 0x7fffffffu;
	if (a > 0x7f800000u) return sign | 0x7fu;
	const float af = __uint_as_float(a);
	if (af >= 448.f) return sign | 0x7eu;
	if (af < 0.015625f) return sign | (unsigned)rintf(af * 512.f); // subnormals: multiples of 2^-9
	const unsigned r = (a + 0x7ffffu + ((a >> 20) & 1u)) >> 20;     // 3 mantissa bits, carry into the exponent
	return sign | min(r - (120u << 3), 0x7eu);
}

// f2e4m3x8 narrows 8 floats (already divided by the scale) to 8 E4M3 codes
// in memory order, as f2e4m3 does each: on sm_89+ with the hardware
// cvt.rn.satfinite.e4m3x2.f32 (round to nearest even, finite values beyond
// ±448 and infinities saturate to ±448, as f2e4m3 does); a NaN, whose sign
// the hardware does not keep, takes f2e4m3 for the group.
__device__ __forceinline__ uint2 f2e4m3x8(const float* f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
	bool nan = false;
#pragma unroll
	for (int j = 0; j < 8; j++) nan |= f[j] != f[j];
	if (!nan) {
		unsigned short h[4];
#pragma unroll
		for (int j = 0; j < 4; j++) // the first operand lands in the upper byte
			asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(h[j]) : "f"(f[2 * j + 1]), "f"(f[2 * j]));
		return make_uint2((unsigned)h[0] | ((unsigned)h[1] << 16), (unsigned)h[2] | ((unsigned)h[3] << 16));
	}
#endif
	unsigned lo = 0, hi = 0;
#pragma unroll
	for (int j = 0; j < 4; j++) {
		lo |= f2e4m3(f[j]) << (8 * j);
		hi |= f2e4m3(f[j + 4]) << (8 * j);
	}
	return make_uint2(lo, hi);
}

// QUANT_HELD is how many 16-byte groups of a row each thread of
// quant_rows_e4m3 keeps in registers between the two passes (rows up to
// 256·8·8 = 16384 values are read once; longer ones re-read the rest).
#define QUANT_HELD 8

// e4m3_row_scale is a row's E4M3 scale from each thread's running |max| m
// of it: the block's maximum over 448, or 1 where that is 0, NaN or
// infinite (the Go reference's rule); sh holds a float per warp. Every
// thread of the block calls it and gets the scale.
__device__ __forceinline__ float e4m3_row_scale(float m, float* sh) {
	m = warp_max(m);
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	if (lane == 0) sh[w] = m;
	__syncthreads();
	m = lane < (int)(blockDim.x >> 5) ? sh[lane] : 0.f;
	m = warp_max(m);
	float s = __fdiv_rn(m, 448.f);
	if (!(s > 0.f) || s > 3e38f) s = 1.f;
	return s;
}

// quant_rows_e4m3: per-token quantization of x[T,K] (bf16, K % 8 == 0, x
// and q 16-byte aligned): s = max|x[r,:]|/448 (1 when that is 0 or not
// finite), q[r,c] = E4M3(x[r,c]/s) (an exact division), scales[r] = s —
// kernels.QuantizeRowFP8 bit for bit. Blocks 0..T-1 take a row each (256
// threads, 16-byte loads kept in registers, the maximum by warp shuffles).
//
// The blocks after the first T convert up to three weights' per-channel
// scales (n0, n1, n2 values of code sdt, as load_as_f32 reads them; a count
// of 0 skips that weight) to fp32 into wsf (n0 + n1 + n2 floats, weight i
// at offset n0 + … + n(i-1)), for a GEMM that applies the scales itself:
// a grid-stride loop over them, so any number of extra blocks works.
extern "C" __global__ void __launch_bounds__(256) quant_rows_e4m3(unsigned char* __restrict__ q, float* __restrict__ scales,
		const bf16_t* __restrict__ x, int T, int K, float* __restrict__ wsf, const void* ws0, const void* ws1, const void* ws2,
		int sdt, int n0, int n1, int n2) {
	if ((int)blockIdx.x >= T) {
		const int total = n0 + n1 + n2;
		for (int e = ((int)blockIdx.x - T) * blockDim.x + threadIdx.x; e < total; e += (gridDim.x - T) * blockDim.x) {
			float v;
			if (e < n0) v = load_as_f32(ws0, sdt, (usize)e);
			else if (e < n0 + n1) v = load_as_f32(ws1, sdt, (usize)(e - n0));
			else v = load_as_f32(ws2, sdt, (usize)(e - n0 - n1));
			wsf[e] = v;
		}
		return;
	}
	__shared__ float sh[32];
	const usize row = blockIdx.x;
	const uint4* xr = reinterpret_cast<const uint4*>(x + row * K);
	uint2* qr = reinterpret_cast<uint2*>(q + row * K);
	const int nv = K >> 3;
	uint4 held[QUANT_HELD];
	float m = 0.f;
#pragma unroll
	for (int j = 0; j < QUANT_HELD; j++) {
		const int i = threadIdx.x + j * blockDim.x;
		if (i < nv) {
			held[j] = xr[i];
			float f[8];
			unpack8(held[j], f);
#pragma unroll
			for (int k = 0; k < 8; k++) m = fmaxf(m, fabsf(f[k])); // fmaxf drops NaN, as the Go loop does
		}
	}
	for (int i = threadIdx.x + QUANT_HELD * blockDim.x; i < nv; i += blockDim.x) {
		float f[8];
		unpack8(xr[i], f);
#pragma unroll
		for (int k = 0; k < 8; k++) m = fmaxf(m, fabsf(f[k]));
	}
	const float s = e4m3_row_scale(m, sh);
	if (threadIdx.x == 0) scales[row] = s;
#pragma unroll
	for (int j = 0; j < QUANT_HELD; j++) {
		const int i = threadIdx.x + j * blockDim.x;
		if (i < nv) {
			float f[8];
			unpack8(held[j], f);
#pragma unroll
			for (int k = 0; k < 8; k++) f[k] = __fdiv_rn(f[k], s);
			qr[i] = f2e4m3x8(f);
		}
	}
	for (int i = threadIdx.x + QUANT_HELD * blockDim.x; i < nv; i += blockDim.x) {
		float f[8];
		unpack8(xr[i], f);
#pragma unroll
		for (int k = 0; k < 8; k++) f[k] = __fdiv_rn(f[k], s);
		qr[i] = f2e4m3x8(f);
	}
}

// fp8_rescale: c[t,o] *= as[t]·s(o) in place over c[T,N] (bf16 when
// out_f32 == 0, else fp32), s the per-output-channel weight scales (code sdt
// as in load_as_f32). N % 8 == 0, c 16-byte aligned; grid-stride over groups
// of 8 elements.
extern "C" __global__ void __launch_bounds__(256) fp8_rescale(void* c, int out_f32, const float* __restrict__ as,
		const void* __restrict__ ws, int sdt, int T, int N) {
	const usize groups = (usize)T * (usize)(N >> 3);
	for (usize g = (usize)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += (usize)gridDim.x * blockDim.x) {
		const usize e = g << 3;
		const int t = (int)(e / (usize)N), o = (int)(e % (usize)N);
		const float a = as[t];
		float sc[8];
#pragma unroll
		for (int j = 0; j < 8; j++) sc[j] = a * load_as_f32(ws, sdt, (usize)(o + j));
		if (out_f32) {
			float4* p = reinterpret_cast<float4*>((float*)c + e);
			float4 v0 = p[0], v1 = p[1];
			v0.x *= sc[0]; v0.y *= sc[1]; v0.z *= sc[2]; v0.w *= sc[3];
			v1.x *= sc[4]; v1.y *= sc[5]; v1.z *= sc[6]; v1.w *= sc[7];
			p[0] = v0;
			p[1] = v1;
		} else {
			uint4* p = reinterpret_cast<uint4*>((bf16_t*)c + e);
			float f[8];
			unpack8(*p, f);
			*p = make_uint4(pack_bf16(f[0] * sc[0], f[1] * sc[1]), pack_bf16(f[2] * sc[2], f[3] * sc[3]),
				pack_bf16(f[4] * sc[4], f[5] * sc[5]), pack_bf16(f[6] * sc[6], f[7] * sc[7]));
		}
	}
}
