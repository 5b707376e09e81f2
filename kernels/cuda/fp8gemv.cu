// FP8 (E4M3) weight-only (W8A16) matrix-vector products for one token at
// HBM speed, and a bandwidth-bound dequantization (the fp8.cu kernels are
// the portable first versions, kept for A/B runs: FT_FP8_GEMV=legacy).
//
// Layout and scales as in fp8.cu: w[n,k] = q[n,k]·s(n,k), s per output row
// (per channel) or per B×B tile, scale dtype sdt (F32, F16 or BF16 code).
// Here the block size B is passed as bshift = log2(B) − 4 (B a power of two,
// at least 16, so that a 16-byte stretch of a row lies in one block) or −1
// for per-channel scales, which are applied once per row after the sum.
//
// How the GEMVs keep up with HBM: each lane streams 16 weight bytes per
// load, U = 8 loads in flight; E4M3 pairs widen to f16x2 with the sm_89+
// cvt.rn.f16x2.e4m3x2 (exact; one instruction per two values) and then to
// fp32; x is widened to fp32 once per block, into shared memory, so a
// 16-byte chunk of weights costs four shared 16-byte loads of x and 16
// fp32 FMAs. The E4M3 NaN code converts to NaN here (checkpoints hold none).

// fp8x4_f16x2 widens the four E4M3 bytes of w (low byte first) to two
// f16x2 words: lo holds bytes 0, 1 and hi bytes 2, 3 (exact).
__device__ __forceinline__ void fp8x4_f16x2(unsigned w, unsigned& lo, unsigned& hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
	asm("{ .reg .b16 a, b;\n\t"
	    "mov.b32 {a, b}, %2;\n\t"
	    "cvt.rn.f16x2.e4m3x2 %0, a;\n\t"
	    "cvt.rn.f16x2.e4m3x2 %1, b; }"
	    : "=r"(lo), "=r"(hi) : "r"(w));
#else
	// Before sm_89: the exponent and mantissa bits shifted into place are a
	// binary16 2^-8 times the E4M3 value (subnormals included); ×256 in
	// f16 is exact.
	const unsigned l = ((w & 0x80u) << 8) | ((w & 0x7fu) << 7) | ((w & 0x8000u) << 16) | ((w & 0x7f00u) << 15);
	const unsigned h = ((w >> 16) & 0x80u) << 8 | ((w >> 16) & 0x7fu) << 7 | (w & 0x80000000u) | ((w >> 1) & 0x3f800000u);
	asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(lo) : "r"(l), "r"(0x5c005c00u));
	asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(hi) : "r"(h), "r"(0x5c005c00u));
#endif
}

// f16x2_f32 widens an f16x2 word to two fp32 values (a: low half).
__device__ __forceinline__ void f16x2_f32(unsigned h, float& a, float& b) {
	asm("{ .reg .b16 l, u;\n\t"
	    "mov.b32 {l, u}, %2;\n\t"
	    "cvt.f32.f16 %0, l;\n\t"
	    "cvt.f32.f16 %1, u; }"
	    : "=f"(a), "=f"(b) : "r"(h));
}

// fp8_dot16 is Σ q_j·x_j over the 16 E4M3 bytes of w and the 16 fp32 x
// values xv[0..3] (in order).
__device__ __forceinline__ float fp8_dot16(uint4 w, const float4* xv) {
	const unsigned ws[4] = {w.x, w.y, w.z, w.w};
	float p[4];
#pragma unroll
	for (int j = 0; j < 4; j++) {
		unsigned lo, hi;
		fp8x4_f16x2(ws[j], lo, hi);
		float a, b, c, d;
		f16x2_f32(lo, a, b);
		f16x2_f32(hi, c, d);
		p[j] = a * xv[j].x;
		p[j] = fmaf(b, xv[j].y, p[j]);
		p[j] = fmaf(c, xv[j].z, p[j]);
		p[j] = fmaf(d, xv[j].w, p[j]);
	}
	return (p[0] + p[1]) + (p[2] + p[3]);
}

// fp8_xs_slot is where x's float4 number f (elements 4f..4f+3) lies in
// shared memory: chunk c = f/4 keeps its four float4s together, their order
// turned by (c/2)%4, so that the eight lanes of a quarter warp (consecutive
// chunks) reading their r-th float4 hit eight different bank groups.
__device__ __forceinline__ int fp8_xs_slot(int f) {
	const int c = f >> 2;
	return (c << 2) | ((f & 3) ^ ((c >> 1) & 3));
}

// fp8_load_x widens x[K] (bf16, 8-byte aligned, K % 16 == 0) into the
// block's shared memory xs (K fp32, swizzled as fp8_xs_slot says).
__device__ __forceinline__ void fp8_load_x(float4* xs, const bf16_t* __restrict__ x, int K) {
	const uint2* x4 = reinterpret_cast<const uint2*>(x);
	for (int f = threadIdx.x; f < (K >> 2); f += blockDim.x) {
		const uint2 v = __ldg(x4 + f);
		xs[fp8_xs_slot(f)] = make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u),
				__uint_as_float(v.y << 16), __uint_as_float(v.y & 0xffff0000u));
	}
	__syncthreads();
}

// fp8_chunk adds chunk c (loaded: a[r]) of R rows to acc: x's 16 values
// from shared memory, each row's chunk sum times its block's scale when
// bshift >= 0 (scale index srow[r] + (c >> bshift)).
template <int R>
__device__ __forceinline__ void fp8_chunk(float* acc, const uint4* a, const float4* xs, int c,
		const void* const* scale, int sdt, const usize* srow, int bshift) {
	const int sw = (c >> 1) & 3;
	float4 xv[4];
#pragma unroll
	for (int j = 0; j < 4; j++) xv[j] = xs[(c << 2) | (j ^ sw)];
#pragma unroll
	for (int r = 0; r < R; r++) {
		const float d = fp8_dot16(a[r], xv);
		acc[r] = bshift >= 0 ? fmaf(d, load_as_f32(scale[r], sdt, srow[r] + (usize)(c >> bshift)), acc[r]) : acc[r] + d;
	}
}

// fp8_rows is one lane's part of R weight rows' dot products with x (in xs):
// acc[r] += Σ over the lane's 16-byte chunks c (lane, lane + 32, …) of
// row r (nv chunks) of q·x (fp8_chunk). U loads per row in flight: whole
// batches unpredicated, then one partial batch.
template <int R, int U>
__device__ __forceinline__ void fp8_rows(float* acc, const uint4* const* wr, const float4* xs, int nv,
		const void* const* scale, int sdt, const usize* srow, int bshift) {
	int c0 = threadIdx.x & 31;
	for (; c0 + 32 * (U - 1) < nv; c0 += 32 * U) {
		uint4 a[U][R];
#pragma unroll
		for (int u = 0; u < U; u++)
#pragma unroll
			for (int r = 0; r < R; r++) a[u][r] = __ldg(wr[r] + c0 + 32 * u);
#pragma unroll
		for (int u = 0; u < U; u++) fp8_chunk<R>(acc, a[u], xs, c0 + 32 * u, scale, sdt, srow, bshift);
	}
	if (c0 < nv) {
		uint4 a[U][R];
#pragma unroll
		for (int u = 0; u < U; u++) {
			const int c = c0 + 32 * u;
#pragma unroll
			for (int r = 0; r < R; r++) a[u][r] = c < nv ? __ldg(wr[r] + c) : make_uint4(0u, 0u, 0u, 0u);
		}
#pragma unroll
		for (int u = 0; u < U; u++)
			if (c0 + 32 * u < nv) fp8_chunk<R>(acc, a[u], xs, c0 + 32 * u, scale, sdt, srow, bshift);
	}
}

// fp8_row_scale finishes a row's sum: the per-channel scale, or 1 (block
// scales were applied per chunk).
__device__ __forceinline__ float fp8_row_scale(const void* scale, int sdt, int row, int bshift) {
	return bshift >= 0 ? 1.f : load_as_f32(scale, sdt, row);
}

#define FP8V_U 8

// fp8_prefetch asks L2 for the first batch of loads of a warp's first row
// (its first 32·U 16-byte chunks), issued before the block widens x, so
// the weights stream while x is staged.
__device__ __forceinline__ void fp8_prefetch(const unsigned char* row, int nv) {
	const int lane = threadIdx.x & 31;
	for (int c = lane; c < nv && c < 32 * FP8V_U; c += 32) asm volatile("prefetch.global.L2 [%0];" ::"l"(row + 16 * (usize)c));
}

// gemv_fp8_v: y[n] = Σ_k x[k]·q[n,k]·s(n,k) for one input row x[K] (bf16),
// y bf16 (out_f32 0) or fp32 (out_f32 1). K % 16 == 0, x 8-byte and w
// 16-byte aligned, K·4 bytes of dynamic shared memory. Persistent warps,
// one row each at a time.
extern "C" __global__ void __launch_bounds__(256) gemv_fp8_v(void* y, int out_f32, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w, const void* __restrict__ scale, int sdt, int N, int K, int bshift, int sstride) {
	extern __shared__ float4 fp8_xs[];
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int nv = K >> 4;
	const int row0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	if (row0 < N) fp8_prefetch(w + (usize)row0 * K, nv);
	fp8_load_x(fp8_xs, x, K);
	for (int row = row0; row < N; row += nw) {
		const uint4* wr[1] = {reinterpret_cast<const uint4*>(w + (usize)row * K)};
		const void* sc[1] = {scale};
		const usize srow[1] = {bshift >= 0 ? (usize)(row >> (bshift + 4)) * sstride : 0};
		float acc[1] = {0.f};
		fp8_rows<1, FP8V_U>(acc, wr, fp8_xs, nv, sc, sdt, srow, bshift);
		const float s = warp_sum(acc[0]) * fp8_row_scale(scale, sdt, row, bshift);
		if (lane == 0) {
			if (out_f32) ((float*)y)[row] = s;
			else ((bf16_t*)y)[row] = f2bf(s);
		}
	}
}

// gemv3_fp8 is three gemv_fp8_v of one input in one launch (a decode step's
// q, k and v projections), bf16 outputs y_j[n] for n < N_j; the weights
// share K, the scale layout and dtype. Persistent warps over the
// N0+N1+N2 rows.
extern "C" __global__ void __launch_bounds__(256) gemv3_fp8(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2,
		const void* __restrict__ s0, const void* __restrict__ s1, const void* __restrict__ s2, int sdt,
		int N0, int N1, int N2, int K, int bshift, int sstride) {
	extern __shared__ float4 fp8_xs[];
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int nv = K >> 4;
	const int r0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	if (r0 < N0) fp8_prefetch(w0 + (usize)r0 * K, nv);
	else if (r0 < N0 + N1) fp8_prefetch(w1 + (usize)(r0 - N0) * K, nv);
	else if (r0 < N0 + N1 + N2) fp8_prefetch(w2 + (usize)(r0 - N0 - N1) * K, nv);
	fp8_load_x(fp8_xs, x, K);
	for (int r = r0; r < N0 + N1 + N2; r += nw) {
		const unsigned char* w;
		const void* s;
		int row;
		if (r < N0) {
			w = w0, s = s0, row = r;
		} else if (r < N0 + N1) {
			w = w1, s = s1, row = r - N0;
		} else {
			w = w2, s = s2, row = r - N0 - N1;
		}
		const uint4* wr[1] = {reinterpret_cast<const uint4*>(w + (usize)row * K)};
		const void* sc[1] = {s};
		const usize srow[1] = {bshift >= 0 ? (usize)(row >> (bshift + 4)) * sstride : 0};
		float acc[1] = {0.f};
		fp8_rows<1, FP8V_U>(acc, wr, fp8_xs, nv, sc, sdt, srow, bshift);
		const float v = warp_sum(acc[0]) * fp8_row_scale(s, sdt, row, bshift);
		if (lane == 0) (r < N0 ? y0 : r < N0 + N1 ? y1 : y2)[row] = f2bf(v);
	}
}

// gemv_gateup_silu_fp8 is Llama's MLP up to the down projection for one
// token with FP8 gate and up weights: act[n] = silu(g)·u, g and u the
// gemv_fp8_v sums of row n of wg and wu (fp32, rounded once). Each warp
// streams row n of both matrices together (2·U loads in flight).
extern "C" __global__ void __launch_bounds__(256) gemv_gateup_silu_fp8(bf16_t* act, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu,
		const void* __restrict__ sg, const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride) {
	extern __shared__ float4 fp8_xs[];
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int nv = K >> 4;
	const int row0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	if (row0 < N) {
		fp8_prefetch(wg + (usize)row0 * K, nv);
		fp8_prefetch(wu + (usize)row0 * K, nv);
	}
	fp8_load_x(fp8_xs, x, K);
	for (int row = row0; row < N; row += nw) {
		const uint4* wr[2] = {reinterpret_cast<const uint4*>(wg + (usize)row * K), reinterpret_cast<const uint4*>(wu + (usize)row * K)};
		const void* sc[2] = {sg, su};
		const usize sr = bshift >= 0 ? (usize)(row >> (bshift + 4)) * sstride : 0;
		const usize srow[2] = {sr, sr};
		float acc[2] = {0.f, 0.f};
		fp8_rows<2, FP8V_U>(acc, wr, fp8_xs, nv, sc, sdt, srow, bshift);
		const float g = warp_sum(acc[0]) * fp8_row_scale(sg, sdt, row, bshift);
		const float u = warp_sum(acc[1]) * fp8_row_scale(su, sdt, row, bshift);
		if (lane == 0) act[row] = f2bf(g / (1.f + expf(-g)) * u);
	}
}

// dequant_fp8_bf16_v16: out[n,k] = bf16(q[n,k]·s(n,k)) for an N×K weight
// with K % 16 == 0 and block 0 or a multiple of 16 (a 16-byte chunk of a
// row lies in one block), N·K/16 < 2^31, w and out 16-byte aligned: one
// 16-byte load and two 16-byte stores per 16 values, grid-stride over the
// chunks.
extern "C" __global__ void __launch_bounds__(256) dequant_fp8_bf16_v16(bf16_t* out, const unsigned char* __restrict__ w,
		const void* __restrict__ scale, int sdt, int N, int K, int block, int sstride) {
	const int cpr = K >> 4; // chunks per row
	const int total = N * cpr;
	const uint4* wv = reinterpret_cast<const uint4*>(w);
	uint4* ov = reinterpret_cast<uint4*>(out);
	for (int g = blockIdx.x * blockDim.x + threadIdx.x; g < total; g += gridDim.x * blockDim.x) {
		const int n = g / cpr, c = g - n * cpr;
		const float s = block ? load_as_f32(scale, sdt, (usize)(n / block) * sstride + (c << 4) / block) : load_as_f32(scale, sdt, n);
		const uint4 q = __ldg(wv + g);
		const unsigned qs[4] = {q.x, q.y, q.z, q.w};
		unsigned o[8];
#pragma unroll
		for (int j = 0; j < 4; j++) {
			unsigned lo, hi;
			fp8x4_f16x2(qs[j], lo, hi);
			float a, b, c2, d;
			f16x2_f32(lo, a, b);
			f16x2_f32(hi, c2, d);
			o[2 * j] = pack_bf16(a * s, b * s);
			o[2 * j + 1] = pack_bf16(c2 * s, d * s);
		}
		ov[2 * (usize)g] = make_uint4(o[0], o[1], o[2], o[3]);
		ov[2 * (usize)g + 1] = make_uint4(o[4], o[5], o[6], o[7]);
	}
}
