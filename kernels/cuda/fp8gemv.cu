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
// load, U loads per row in flight; E4M3 pairs widen to f16x2 with the
// sm_89+ cvt.rn.f16x2.e4m3x2 (exact; one instruction per two values) and
// then to fp32; x comes as fp32 from shared memory or as bf16 from L1
// (the variants further down), 16 fp32 FMAs per 16-byte chunk. The E4M3 NaN code converts to NaN here (checkpoints hold none).

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
// SASS (NVRTC 12.4, sm_90, gemv_fp8_v_u8r1s): the loop is not unrolled,
// one LDG.E.64 a trip whose STS waits for it, so a thread makes K/1024
// serial L2 round trips (14 at K 14,336, every block reading the same x)
// before the barrier and its first weight load. fp8gemvpipe.cu's
// fp8_stage_x keeps four 16-byte loads a thread in flight and is issued
// after the warp's first weight batch.
__device__ __forceinline__ void fp8_load_x(float4* xs, const bf16_t* __restrict__ x, int K) {
	const uint2* x4 = reinterpret_cast<const uint2*>(x);
	for (int f = threadIdx.x; f < (K >> 2); f += blockDim.x) {
		const uint2 v = __ldg(x4 + f);
		xs[fp8_xs_slot(f)] = make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u),
				__uint_as_float(v.y << 16), __uint_as_float(v.y & 0xffff0000u));
	}
	__syncthreads();
}

// fp8_x16 is x's 16 values of chunk c (elements 16c..16c+15) as fp32:
// from shared memory (X 0: xs, fp8_xs_slot's swizzle) or read as bf16
// from global memory and widened in registers (X 1: xg, 16-byte aligned;
// x is small and stays in L1 after the first warps of a block touch it).
template <int X>
__device__ __forceinline__ void fp8_x16(float4* xv, const float4* xs, const uint4* __restrict__ xg, int c) {
	if (X == 0) {
		const int sw = (c >> 1) & 3;
#pragma unroll
		for (int j = 0; j < 4; j++) xv[j] = xs[(c << 2) | (j ^ sw)];
	} else {
		const uint4 b0 = __ldg(xg + 2 * c), b1 = __ldg(xg + 2 * c + 1);
		const unsigned b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
		for (int j = 0; j < 4; j++)
			xv[j] = make_float4(__uint_as_float(b[2 * j] << 16), __uint_as_float(b[2 * j] & 0xffff0000u),
					__uint_as_float(b[2 * j + 1] << 16), __uint_as_float(b[2 * j + 1] & 0xffff0000u));
	}
}

// fp8_chunk adds chunk c (loaded: a[r]) of R rows to acc: x's 16 values
// (fp8_x16), each row's chunk sum times its block's scale when bshift >= 0
// (scale index srow[r] + (c >> bshift)).
template <int R, int X>
__device__ __forceinline__ void fp8_chunk(float* acc, const uint4* a, const float4* xs, const uint4* __restrict__ xg, int c,
		const void* const* scale, int sdt, const usize* srow, int bshift) {
	float4 xv[4];
	fp8_x16<X>(xv, xs, xg, c);
#pragma unroll
	for (int r = 0; r < R; r++) {
		const float d = fp8_dot16(a[r], xv);
		acc[r] = bshift >= 0 ? fmaf(d, load_as_f32(scale[r], sdt, srow[r] + (usize)(c >> bshift)), acc[r]) : acc[r] + d;
	}
}

// fp8_rows is one lane's part of R weight rows' dot products with x:
// acc[r] += Σ over the lane's 16-byte chunks c (lane, lane + 32, …) of
// row r (nv chunks) of q·x (fp8_chunk). U loads per row in flight: whole
// batches unpredicated, then one partial batch. a is the batch buffer.
template <int R, int U, int X>
__device__ __forceinline__ void fp8_rows(float* acc, const uint4* const* wr, const float4* xs, const uint4* __restrict__ xg, int nv,
		const void* const* scale, int sdt, const usize* srow, int bshift, uint4 (&a)[U][R]) {
	int c0 = threadIdx.x & 31;
	for (; c0 + 32 * (U - 1) < nv; c0 += 32 * U) {
#pragma unroll
		for (int u = 0; u < U; u++)
#pragma unroll
			for (int r = 0; r < R; r++) a[u][r] = __ldg(wr[r] + c0 + 32 * u);
#pragma unroll
		for (int u = 0; u < U; u++) fp8_chunk<R, X>(acc, a[u], xs, xg, c0 + 32 * u, scale, sdt, srow, bshift);
	}
	if (c0 < nv) {
#pragma unroll
		for (int u = 0; u < U; u++) {
			const int c = c0 + 32 * u;
#pragma unroll
			for (int r = 0; r < R; r++) a[u][r] = c < nv ? __ldg(wr[r] + c) : make_uint4(0u, 0u, 0u, 0u);
		}
#pragma unroll
		for (int u = 0; u < U; u++)
			if (c0 + 32 * u < nv) fp8_chunk<R, X>(acc, a[u], xs, xg, c0 + 32 * u, scale, sdt, srow, bshift);
	}
}

// fp8_row_scale finishes a row's sum: the per-channel scale, or 1 (block
// scales were applied per chunk).
__device__ __forceinline__ float fp8_row_scale(const void* scale, int sdt, int row, int bshift) {
	return bshift >= 0 ? 1.f : load_as_f32(scale, sdt, row);
}

// fp8_srow is the scale index of row's first block (0 per channel).
__device__ __forceinline__ usize fp8_srow(int row, int bshift, int sstride) {
	return bshift >= 0 ? (usize)(row >> (bshift + 4)) * sstride : 0;
}

// fp8_store writes a one-token GEMV's result s of row: y bf16 (out 0),
// fp32 (out 1), or added to fp32 y (out 2; __fadd_rn so that the compiler
// cannot contract it with the product into an FMA: the sum is bit for bit
// the fp32 store's value added by add_f32).
__device__ __forceinline__ void fp8_store(void* y, int out, int row, float s) {
	if (out == 2) ((float*)y)[row] = __fadd_rn(((float*)y)[row], s);
	else if (out) ((float*)y)[row] = s;
	else ((bf16_t*)y)[row] = f2bf(s);
}

// Tuning variants (fp8gemv.go's fp8Variants; FT_FP8_VARIANT picks one at
// run time, so that one GPU run can compare them). Each kernel below is a
// template over
//   U: 16-byte loads in flight per lane and weight row (4, 8, 16);
//   R: rows per warp at a time (1, or 2 adjacent rows whose loads are
//      interleaved: twice the independent loads of a lane);
//   X: where x comes from: 0, widened to fp32 once per block into shared
//      memory (K·4 bytes; four 16-byte shared loads per 16 weight bytes);
//      1, read as bf16 straight from global memory (L1) and widened in
//      registers (two 16-byte loads per 16 weight bytes, no shared memory,
//      no block barrier: a warp starts streaming weights right after
//      ft_pdl_wait).
// gemv_gateup_silu_fp8 streams two matrices per row, so it keeps at most
// 32 loads per lane in flight: U·2R ≤ 32 (U 16 with R 2 runs U 8).
// A batch's U·R loads are issued back to back (SASS of u8r1s: 8 LDG.128),
// but nothing is in flight while the warp computes the batch (~55
// instructions a 16-byte chunk: 4 LDS.128, 8 F2FP, 16 HADD2.F32, 16
// FFMA/FMUL, 3 FADD) or reduces its row; at the decode shapes fp8Grid
// gives each warp one or two rows, all warps start together, so these
// phases stay in step and the DRAM queue drains during them (o, down:
// one row a warp; down's 28 chunks a lane are 4 serial batches). The
// pipelined variants (fp8gemvpipe.cu) keep the next batch in flight.
//
// Every kernel calls ft_pdl_wait before it reads x or writes y, so all are
// launched as programmatic dependents (pdl.go), and loads nothing before
// it. The FP8 GEMVs have no early twins: s4a measured early loads slower
// before the GEMVs were persistent, and s15b measured the BF16 early twins
// faster or equal (gemvearly.go); untried for FP8.

// gemv_fp8_v_body: y[n] = Σ_k x[k]·q[n,k]·s(n,k) for one input row x[K]
// (bf16), y bf16 (out_f32 0) or fp32 (out_f32 1), or y[n] += that sum, y
// fp32 (out_f32 2: the residual stream, fp8_store). K % 16 == 0, x and w
// 16-byte aligned, K·4 bytes of dynamic shared memory when X is 0.
// Persistent warps, R rows each at a time.
template <int U, int R, int X>
__device__ __forceinline__ void gemv_fp8_v_body(void* y, int out_f32, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w, const void* __restrict__ scale, int sdt, int N, int K, int bshift, int sstride) {
	extern __shared__ float4 fp8_xs[];
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int nv = K >> 4;
	const uint4* xg = reinterpret_cast<const uint4*>(x);
	const int g0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	uint4 a[U][R];
	ft_pdl_wait();
	if (X == 0) fp8_load_x(fp8_xs, x, K);
	for (int g = g0; g * R < N; g += nw) {
		const uint4* wr[R];
		const void* sc[R];
		usize srow[R];
		float acc[R];
#pragma unroll
		for (int r = 0; r < R; r++) {
			const int row = min(g * R + r, N - 1); // a pair past the end reads the last row twice
			wr[r] = reinterpret_cast<const uint4*>(w + (usize)row * K);
			sc[r] = scale;
			srow[r] = fp8_srow(row, bshift, sstride);
			acc[r] = 0.f;
		}
		fp8_rows<R, U, X>(acc, wr, fp8_xs, xg, nv, sc, sdt, srow, bshift, a);
#pragma unroll
		for (int r = 0; r < R; r++) {
			const int row = g * R + r;
			const float s = warp_sum(acc[r]) * fp8_row_scale(scale, sdt, min(row, N - 1), bshift);
			if (lane == 0 && row < N) fp8_store(y, out_f32, row, s);
		}
	}
}

// gemv3_fp8_body is three gemv_fp8_v of one input in one launch (a decode
// step's q, k and v projections), bf16 outputs y_j[n] for n < N_j; the
// weights share K, the scale layout and dtype. Persistent warps over the
// N0+N1+N2 rows, R at a time (a pair may straddle two matrices).
template <int U, int R, int X>
__device__ __forceinline__ void gemv3_fp8_body(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2,
		const void* __restrict__ s0, const void* __restrict__ s1, const void* __restrict__ s2, int sdt,
		int N0, int N1, int N2, int K, int bshift, int sstride) {
	extern __shared__ float4 fp8_xs[];
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int nv = K >> 4;
	const int T = N0 + N1 + N2;
	const uint4* xg = reinterpret_cast<const uint4*>(x);
	const int g0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	uint4 a[U][R];
	ft_pdl_wait();
	if (X == 0) fp8_load_x(fp8_xs, x, K);
	for (int g = g0; g * R < T; g += nw) {
		const uint4* wr[R];
		const void* sc[R];
		usize srow[R];
		int rows[R];
		bf16_t* ys[R];
		float acc[R];
#pragma unroll
		for (int r = 0; r < R; r++) {
			const int t = min(g * R + r, T - 1);
			const unsigned char* w;
			if (t < N0) {
				w = w0, sc[r] = s0, ys[r] = y0, rows[r] = t;
			} else if (t < N0 + N1) {
				w = w1, sc[r] = s1, ys[r] = y1, rows[r] = t - N0;
			} else {
				w = w2, sc[r] = s2, ys[r] = y2, rows[r] = t - N0 - N1;
			}
			wr[r] = reinterpret_cast<const uint4*>(w + (usize)rows[r] * K);
			srow[r] = fp8_srow(rows[r], bshift, sstride);
			acc[r] = 0.f;
		}
		fp8_rows<R, U, X>(acc, wr, fp8_xs, xg, nv, sc, sdt, srow, bshift, a);
#pragma unroll
		for (int r = 0; r < R; r++) {
			const float v = warp_sum(acc[r]) * fp8_row_scale(sc[r], sdt, rows[r], bshift);
			if (lane == 0 && g * R + r < T) ys[r][rows[r]] = f2bf(v);
		}
	}
}

// gemv_gateup_silu_fp8_body is Llama's MLP up to the down projection for
// one token with FP8 gate and up weights: act[n] = silu(g)·u, g and u the
// gemv_fp8_v sums of row n of wg and wu (fp32, rounded once). Each warp
// streams R rows of both matrices together (2R·U loads in flight).
template <int U, int R, int X>
__device__ __forceinline__ void gemv_gateup_silu_fp8_body(bf16_t* act, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu,
		const void* __restrict__ sg, const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride) {
	extern __shared__ float4 fp8_xs[];
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int nv = K >> 4;
	const uint4* xg = reinterpret_cast<const uint4*>(x);
	constexpr int UG = U * 2 * R > 32 ? 16 / R : U; // loads per row in flight
	const int g0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	uint4 a[UG][2 * R];
	ft_pdl_wait();
	if (X == 0) fp8_load_x(fp8_xs, x, K);
	for (int g = g0; g * R < N; g += nw) {
		const uint4* wr[2 * R];
		const void* sc[2 * R];
		usize srow[2 * R];
		float acc[2 * R];
#pragma unroll
		for (int r = 0; r < R; r++) {
			const int row = min(g * R + r, N - 1);
			wr[2 * r] = reinterpret_cast<const uint4*>(wg + (usize)row * K);
			wr[2 * r + 1] = reinterpret_cast<const uint4*>(wu + (usize)row * K);
			sc[2 * r] = sg, sc[2 * r + 1] = su;
			srow[2 * r] = srow[2 * r + 1] = fp8_srow(row, bshift, sstride);
			acc[2 * r] = acc[2 * r + 1] = 0.f;
		}
		fp8_rows<2 * R, UG, X>(acc, wr, fp8_xs, xg, nv, sc, sdt, srow, bshift, a);
#pragma unroll
		for (int r = 0; r < R; r++) {
			const int row = g * R + r;
			const int rc = min(row, N - 1);
			const float gv = warp_sum(acc[2 * r]) * fp8_row_scale(sg, sdt, rc, bshift);
			const float uv = warp_sum(acc[2 * r + 1]) * fp8_row_scale(su, sdt, rc, bshift);
			if (lane == 0 && row < N) act[row] = f2bf(gv / (1.f + expf(-gv)) * uv);
		}
	}
}

#define FP8V_KERNELS(NAME, U, R, X) \
	extern "C" __global__ void __launch_bounds__(256) gemv_fp8_v_##NAME(void* y, int out_f32, const bf16_t* __restrict__ x, \
			const unsigned char* __restrict__ w, const void* __restrict__ scale, int sdt, int N, int K, int bshift, int sstride) { \
		gemv_fp8_v_body<U, R, X>(y, out_f32, x, w, scale, sdt, N, K, bshift, sstride); \
	} \
	extern "C" __global__ void __launch_bounds__(256) gemv3_fp8_##NAME(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* __restrict__ x, \
			const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2, \
			const void* __restrict__ s0, const void* __restrict__ s1, const void* __restrict__ s2, int sdt, \
			int N0, int N1, int N2, int K, int bshift, int sstride) { \
		gemv3_fp8_body<U, R, X>(y0, y1, y2, x, w0, w1, w2, s0, s1, s2, sdt, N0, N1, N2, K, bshift, sstride); \
	} \
	extern "C" __global__ void __launch_bounds__(256) gemv_gateup_silu_fp8_##NAME(bf16_t* act, const bf16_t* __restrict__ x, \
			const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu, \
			const void* __restrict__ sg, const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride) { \
		gemv_gateup_silu_fp8_body<U, R, X>(act, x, wg, wu, sg, su, sdt, N, K, bshift, sstride); \
	}

// FP8V_VARIANT instantiates the three GEMVs for one variant: kernels
// gemv_fp8_v_<name>, gemv3_fp8_<name> and gemv_gateup_silu_fp8_<name>,
// name u<U>r<R><s|g> (s: x in shared memory, X 0; g: x from global, X 1).
#define FP8V_VARIANT(NAME, U, R, X) FP8V_KERNELS(NAME, U, R, X)

FP8V_VARIANT(u4r1s, 4, 1, 0)
FP8V_VARIANT(u8r1s, 8, 1, 0)
FP8V_VARIANT(u16r1s, 16, 1, 0)
FP8V_VARIANT(u4r2s, 4, 2, 0)
FP8V_VARIANT(u8r2s, 8, 2, 0)
FP8V_VARIANT(u16r2s, 16, 2, 0)
FP8V_VARIANT(u4r1g, 4, 1, 1)
FP8V_VARIANT(u8r1g, 8, 1, 1)
FP8V_VARIANT(u16r1g, 16, 1, 1)
FP8V_VARIANT(u4r2g, 4, 2, 1)
FP8V_VARIANT(u8r2g, 8, 2, 1)
FP8V_VARIANT(u16r2g, 16, 2, 1)

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
