// FP8 (E4M3) weight-only one-token GEMVs on the tensor cores: the "tc"
// variants of fp8gemv.cu's gemv_fp8_v, gemv3_fp8 and gemv_gateup_silu_fp8
// (same names with the suffix tc<U>, same arguments), per-channel scales
// only (bshift −1: fp8gemv.go runs the u… variants for block scales).
//
// Why: fp8gemv.cu's kernels spend per 16 weight bytes 8 conversions to
// f16x2, 16 widenings to fp32, 16 fp32 FMAs and four 16-byte shared loads
// of x; an FP8 byte carries twice the multiply-adds of a BF16 byte and the
// kernels top out near 2.5 TB/s. Here a warp multiplies a 16-row tile of
// the weight by x with mma.sync m16n8k16 (f16 in, fp32 accumulate): per 16
// weight bytes a lane does 8 cvt.rn.f16x2.e4m3x2, two mma and one 16-byte
// shared load of x (shared by the tile's two rows), and no warp reduction.
//
// Fragments (PTX ISA, m16n8k16 .f16): lane l = 4g + q holds A at rows g and
// g+8, columns 2q+{0,1} and 2q+8+{0,1}; B at rows 2q+{0,1} and 2q+8+{0,1},
// column g; C at rows g and g+8, columns 2q+{0,1}. A dot product may sum k
// in any order as long as A and B agree, so lane (g, q) loads the 16-byte
// chunk c of rows g and g+8 (P, P' the eight f16x2 of each) and feeds
// mma j (0..3) A = {P[2j], P'[2j], P[2j+1], P'[2j+1]} and B = x's f16x2
// pairs 2j and 2j+1 of the same chunk: logical column 2q+t of mma j is
// element 16c + 4j + t (t 0, 1), 2q+8+t is 16c + 4j + 2 + t. Every lane
// of a quarter (same q) uses the same k, and the four quarters' chunks
// differ, so each mma sums 16 distinct elements. Column 0 of C (lanes with
// q 0: c[0] row g, c[2] row g+8) is the tile's product with x; columns 1..7
// repeat it (B's column g is x for every g) and are dropped.
//
// x as f16: each block reads x (bf16) into shared memory once, with
// max|x|, and rewrites it as x·2^e in f16, 2^e the power of two that puts
// max|x|·2^e in [2^14, 2^15) (bf16 in f16's normal range is exact: 8
// significant bits of 11); the product is multiplied by 2^−e and the
// row's scale at the end. Only elements under max|x|·2^−28 lose bits (f16
// subnormals, absolute error ≤ max|x|·2^−40 each). E4M3 → f16 is exact,
// f16 products are exact in fp32 and the tensor cores accumulate in fp32,
// so the result is the fp32 dot product up to the accumulation's rounding
// (as in the fp32-FMA kernels; fp8gemv_test.go compares with the CPU
// reference at the same tolerances).
//
// Work: a block of 8 warps takes one 16-row tile (grid: ⌈rows/16⌉ blocks,
// scheduled by the hardware, so the tail is one tile); its warps split K
// into 64-byte segments (4 chunks: one per quarter), warp w segments w,
// w+8, …, U segments per row in flight (2U 16-byte loads a lane; the
// gate·up kernel streams both matrices, 4·(U/2)). The first loads are
// issued before x is staged, so that x's latency hides under theirs. The
// warps' partial sums meet in shared memory; 16 threads finish the rows
// (scale, 2^−e, output; SiLU·up for gate·up). Dynamic shared memory:
// 2·⌈K/64⌉·64 bytes (x in f16, zero past K).

// FP8TC_WARPS is the warps of a block (the K split).
#define FP8TC_WARPS 8

// fp8tc_stage_x fills xs (⌈K/64⌉·64 halves) with x[K] (bf16, 16-byte
// aligned, K % 16 == 0) times 2^e as f16 and zero past K, and returns 2^−e
// (see the top comment). red is 8 words of scratch. Ends with a barrier.
__device__ __forceinline__ float fp8tc_stage_x(uint4* xs, const bf16_t* __restrict__ x, int K, unsigned* red) {
	const int n8 = K >> 3; // uint4s of x
	const int p8 = ((K + 63) >> 6) << 3;
	const uint4* xg = reinterpret_cast<const uint4*>(x);
	unsigned m = 0; // max |x| as bf16 bits (monotonic in the value, NaN above inf)
	for (int i = threadIdx.x; i < p8; i += blockDim.x) {
		uint4 v = make_uint4(0u, 0u, 0u, 0u);
		if (i < n8) v = __ldg(xg + i);
		const unsigned ws[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
		for (int j = 0; j < 4; j++) m = max(m, max(ws[j] & 0x7fffu, (ws[j] >> 16) & 0x7fffu));
		xs[i] = v;
	}
	m = __reduce_max_sync(0xffffffffu, m);
	if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
	__syncthreads();
	m = 0;
	for (int i = 0; i < (int)(blockDim.x >> 5); i++) m = max(m, red[i]);
	// max|x| = 2^E·1.f (bf16 exponent field m>>7): e = 14 − E, within
	// ±126 so that 2^e and 2^−e are normal floats (x = 0: e 0).
	int e = m == 0 ? 0 : 14 - ((int)(m >> 7) - 127);
	e = min(126, max(-126, e));
	const float up = __int_as_float((127 + e) << 23);
	for (int i = threadIdx.x; i < p8; i += blockDim.x) {
		const uint4 v = xs[i]; // this thread's own store above
		const unsigned ws[4] = {v.x, v.y, v.z, v.w};
		unsigned h[4];
#pragma unroll
		for (int j = 0; j < 4; j++) {
			const float lo = __uint_as_float(ws[j] << 16) * up, hi = __uint_as_float(ws[j] & 0xffff0000u) * up;
			asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(h[j]) : "f"(hi), "f"(lo));
		}
		xs[i] = make_uint4(h[0], h[1], h[2], h[3]);
	}
	__syncthreads();
	return __int_as_float((127 - e) << 23);
}

// mma_f16: c[16×8] += a[16×16]·b[16×8], f16 in, fp32 accumulate (the
// m16n8k16 fragments of mma_bf16 in common.cuh).
__device__ __forceinline__ void mma_f16(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
	asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
		: "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		: "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// fp8tc_chunk adds one chunk of M row pairs to acc: lo[m] and hi[m] the
// chunk of rows g and g+8 of tile m (E4M3 codes), xv x's 16 values of the
// chunk (f16x2 pairs 0..7); acc[m][j] is mma j's accumulator of tile m.
template <int M>
__device__ __forceinline__ void fp8tc_chunk(float (*acc)[4][4], const uint4* lo, const uint4* hi, const unsigned* xv) {
#pragma unroll
	for (int m = 0; m < M; m++) {
		const unsigned wl[4] = {lo[m].x, lo[m].y, lo[m].z, lo[m].w};
		const unsigned wh[4] = {hi[m].x, hi[m].y, hi[m].z, hi[m].w};
#pragma unroll
		for (int j = 0; j < 4; j++) {
			unsigned p0, p1, h0, h1;
			fp8x4_f16x2(wl[j], p0, p1);
			fp8x4_f16x2(wh[j], h0, h1);
			mma_f16(acc[m][j], p0, h0, p1, h1, xv[2 * j], xv[2 * j + 1]);
		}
	}
}

// fp8tc_tile is one warp's part of M 16-row tiles' products with x (xs,
// staged by fp8tc_stage_x after the first batch of loads is issued): rows
// lo[m] (row g of tile m) and hi[m] (row g+8), nv chunks a row. Returns,
// in lanes with q 0, the warp's partial sums of rows g (out[m][0]) and g+8
// (out[m][1]). Stages x itself and returns 2^−e in *unscale.
template <int M, int U>
__device__ __forceinline__ void fp8tc_tile(float (*out)[2], const uint4* const* lo, const uint4* const* hi, int nv,
		uint4* xs, const bf16_t* __restrict__ x, int K, unsigned* red, float* unscale) {
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, q = lane & 3;
	const int S = (nv + 3) >> 2; // 64-byte segments of a row
	float acc[M][4][4];
#pragma unroll
	for (int m = 0; m < M; m++)
#pragma unroll
		for (int j = 0; j < 4; j++) acc[m][j][0] = acc[m][j][1] = acc[m][j][2] = acc[m][j][3] = 0.f;
	uint4 al[U][M], ah[U][M];
	// Lane's next chunk of each row (chunk 4·(warp + 8·(u + U·i)) + q for
	// load u of batch i) and how many chunks of the row remain from it.
	const uint4* pl[M];
	const uint4* ph[M];
#pragma unroll
	for (int m = 0; m < M; m++) pl[m] = lo[m] + 4 * warp + q, ph[m] = hi[m] + 4 * warp + q;
	int rem = nv - (4 * warp + q);
	int s0 = warp;
	const uint4 z = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
	for (int u = 0; u < U; u++)
#pragma unroll
		for (int m = 0; m < M; m++) {
			al[u][m] = 4 * FP8TC_WARPS * u < rem ? __ldg(pl[m] + 4 * FP8TC_WARPS * u) : z;
			ah[u][m] = 4 * FP8TC_WARPS * u < rem ? __ldg(ph[m] + 4 * FP8TC_WARPS * u) : z;
		}
	*unscale = fp8tc_stage_x(xs, x, K, red);
	for (;;) {
		const uint4* xb = xs + 2 * (4 * s0 + q);
#pragma unroll
		for (int u = 0; u < U; u++) {
			if (s0 + FP8TC_WARPS * u < S) { // xs holds zeros past K up to 64·S halves
				const uint4 x0 = xb[8 * FP8TC_WARPS * u], x1 = xb[8 * FP8TC_WARPS * u + 1];
				const unsigned xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
				fp8tc_chunk<M>(acc, al[u], ah[u], xv);
			}
		}
		s0 += FP8TC_WARPS * U;
		if (s0 >= S) break;
		rem -= 4 * FP8TC_WARPS * U;
#pragma unroll
		for (int m = 0; m < M; m++) pl[m] += 4 * FP8TC_WARPS * U, ph[m] += 4 * FP8TC_WARPS * U;
#pragma unroll
		for (int u = 0; u < U; u++)
#pragma unroll
			for (int m = 0; m < M; m++) {
				al[u][m] = 4 * FP8TC_WARPS * u < rem ? __ldg(pl[m] + 4 * FP8TC_WARPS * u) : z;
				ah[u][m] = 4 * FP8TC_WARPS * u < rem ? __ldg(ph[m] + 4 * FP8TC_WARPS * u) : z;
			}
	}
#pragma unroll
	for (int m = 0; m < M; m++) {
		out[m][0] = (acc[m][0][0] + acc[m][1][0]) + (acc[m][2][0] + acc[m][3][0]);
		out[m][1] = (acc[m][0][2] + acc[m][1][2]) + (acc[m][2][2] + acc[m][3][2]);
	}
}

// fp8tc_reduce sums the warps' partial sums of M tiles (out from
// fp8tc_tile) in part (FP8TC_WARPS·M·16 floats); after it, thread t < 16
// finds row t's sum of tile m at part[m·16 + t] (returned for m 0 by
// value through the caller's reads). Ends with a barrier.
template <int M>
__device__ __forceinline__ void fp8tc_reduce(float* part, float (*out)[2]) {
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2;
	if ((lane & 3) == 0) {
#pragma unroll
		for (int m = 0; m < M; m++) {
			part[(warp * M + m) * 16 + g] = out[m][0];
			part[(warp * M + m) * 16 + g + 8] = out[m][1];
		}
	}
	__syncthreads();
	if (threadIdx.x < 16 * M) {
		float s = 0.f;
#pragma unroll
		for (int w = 0; w < FP8TC_WARPS; w++) s += part[w * M * 16 + threadIdx.x];
		part[FP8TC_WARPS * M * 16 + threadIdx.x] = s;
	}
	__syncthreads();
}

// gemv_fp8_v_tc_body: y[n] = Σ_k x[k]·q[n,k]·s[n] (per-channel scales),
// as gemv_fp8_v_body; block b takes rows 16b..16b+15.
template <int U>
__device__ __forceinline__ void gemv_fp8_v_tc_body(void* y, int out_f32, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w, const void* __restrict__ scale, int sdt, int N, int K) {
	extern __shared__ uint4 fp8tc_xs[];
	__shared__ float part[(FP8TC_WARPS + 1) * 16];
	__shared__ unsigned red[FP8TC_WARPS];
	const int g = (threadIdx.x & 31) >> 2;
	const int r0 = blockIdx.x * 16;
	const uint4* lo[1] = {reinterpret_cast<const uint4*>(w + (usize)min(r0 + g, N - 1) * K)};
	const uint4* hi[1] = {reinterpret_cast<const uint4*>(w + (usize)min(r0 + g + 8, N - 1) * K)};
	float out[1][2], unscale;
	ft_pdl_wait();
	fp8tc_tile<1, U>(out, lo, hi, K >> 4, fp8tc_xs, x, K, red, &unscale);
	fp8tc_reduce<1>(part, out);
	const int row = r0 + threadIdx.x;
	if (threadIdx.x < 16 && row < N) {
		const float v = part[FP8TC_WARPS * 16 + threadIdx.x] * unscale * load_as_f32(scale, sdt, row);
		fp8_store(y, out_f32, row, v); // out_f32 2: y[row] += v (fp8gemv.cu)
	}
}

// fp8tc_rowptr is row t of the stacked N0+N1+N2 rows of gemv3 (t clamped
// to the last row): its weight row, and through mi and ri its matrix and
// row there.
__device__ __forceinline__ const uint4* fp8tc_rowptr(int t, int T, const unsigned char* w0, const unsigned char* w1,
		const unsigned char* w2, int N0, int N1, int K, int& mi, int& ri) {
	t = min(t, T - 1);
	const unsigned char* w;
	if (t < N0) w = w0, mi = 0, ri = t;
	else if (t < N0 + N1) w = w1, mi = 1, ri = t - N0;
	else w = w2, mi = 2, ri = t - N0 - N1;
	return reinterpret_cast<const uint4*>(w + (usize)ri * K);
}

// gemv3_fp8_tc_body is gemv3_fp8_body on the tensor cores: 16-row tiles
// of the stacked rows (a tile may straddle two matrices: each lane has its
// own row pointers).
template <int U>
__device__ __forceinline__ void gemv3_fp8_tc_body(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2,
		const void* __restrict__ s0, const void* __restrict__ s1, const void* __restrict__ s2, int sdt, int N0, int N1, int N2, int K) {
	extern __shared__ uint4 fp8tc_xs[];
	__shared__ float part[(FP8TC_WARPS + 1) * 16];
	__shared__ unsigned red[FP8TC_WARPS];
	const int T = N0 + N1 + N2;
	const int g = (threadIdx.x & 31) >> 2;
	const int r0 = blockIdx.x * 16;
	int mi, ri;
	const uint4* lo[1] = {fp8tc_rowptr(r0 + g, T, w0, w1, w2, N0, N1, K, mi, ri)};
	const uint4* hi[1] = {fp8tc_rowptr(r0 + g + 8, T, w0, w1, w2, N0, N1, K, mi, ri)};
	float out[1][2], unscale;
	ft_pdl_wait();
	fp8tc_tile<1, U>(out, lo, hi, K >> 4, fp8tc_xs, x, K, red, &unscale);
	fp8tc_reduce<1>(part, out);
	const int t = r0 + threadIdx.x;
	if (threadIdx.x < 16 && t < T) {
		fp8tc_rowptr(t, T, w0, w1, w2, N0, N1, K, mi, ri);
		const void* s = mi == 0 ? s0 : mi == 1 ? s1 : s2;
		bf16_t* y = mi == 0 ? y0 : mi == 1 ? y1 : y2;
		y[ri] = f2bf(part[FP8TC_WARPS * 16 + threadIdx.x] * unscale * load_as_f32(s, sdt, ri));
	}
}

// gemv_gateup_silu_fp8_tc_body is gemv_gateup_silu_fp8_body on the tensor
// cores: a block takes rows 16b..16b+15 of both matrices (two tiles per
// warp, U/2 segments each in flight).
template <int U>
__device__ __forceinline__ void gemv_gateup_silu_fp8_tc_body(bf16_t* act, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu,
		const void* __restrict__ sg, const void* __restrict__ su, int sdt, int N, int K) {
	extern __shared__ uint4 fp8tc_xs[];
	__shared__ float part[(FP8TC_WARPS + 1) * 32];
	__shared__ unsigned red[FP8TC_WARPS];
	constexpr int UG = U > 1 ? U / 2 : 1;
	const int g = (threadIdx.x & 31) >> 2;
	const int r0 = blockIdx.x * 16;
	const usize ol = (usize)min(r0 + g, N - 1) * K, oh = (usize)min(r0 + g + 8, N - 1) * K;
	const uint4* lo[2] = {reinterpret_cast<const uint4*>(wg + ol), reinterpret_cast<const uint4*>(wu + ol)};
	const uint4* hi[2] = {reinterpret_cast<const uint4*>(wg + oh), reinterpret_cast<const uint4*>(wu + oh)};
	float out[2][2], unscale;
	ft_pdl_wait();
	fp8tc_tile<2, UG>(out, lo, hi, K >> 4, fp8tc_xs, x, K, red, &unscale);
	fp8tc_reduce<2>(part, out);
	const int row = r0 + threadIdx.x;
	if (threadIdx.x < 16 && row < N) {
		const float gv = part[FP8TC_WARPS * 32 + threadIdx.x] * unscale * load_as_f32(sg, sdt, row);
		const float uv = part[FP8TC_WARPS * 32 + 16 + threadIdx.x] * unscale * load_as_f32(su, sdt, row);
		act[row] = f2bf(gv / (1.f + expf(-gv)) * uv);
	}
}

// FP8TC_VARIANT instantiates the three tensor-core GEMVs of variant tc<U>
// with fp8gemv.cu's argument lists (bshift must be −1, sstride unused).
#define FP8TC_VARIANT(NAME, U) \
	extern "C" __global__ void __launch_bounds__(256, 2) gemv_fp8_v_##NAME(void* y, int out_f32, const bf16_t* __restrict__ x, \
			const unsigned char* __restrict__ w, const void* __restrict__ scale, int sdt, int N, int K, int bshift, int sstride) { \
		gemv_fp8_v_tc_body<U>(y, out_f32, x, w, scale, sdt, N, K); \
	} \
	extern "C" __global__ void __launch_bounds__(256, 2) gemv3_fp8_##NAME(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* __restrict__ x, \
			const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2, \
			const void* __restrict__ s0, const void* __restrict__ s1, const void* __restrict__ s2, int sdt, \
			int N0, int N1, int N2, int K, int bshift, int sstride) { \
		gemv3_fp8_tc_body<U>(y0, y1, y2, x, w0, w1, w2, s0, s1, s2, sdt, N0, N1, N2, K); \
	} \
	extern "C" __global__ void __launch_bounds__(256, 2) gemv_gateup_silu_fp8_##NAME(bf16_t* act, const bf16_t* __restrict__ x, \
			const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu, \
			const void* __restrict__ sg, const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride) { \
		gemv_gateup_silu_fp8_tc_body<U>(act, x, wg, wu, sg, su, sdt, N, K); \
	}

FP8TC_VARIANT(tc4, 4)
FP8TC_VARIANT(tc8, 8)
