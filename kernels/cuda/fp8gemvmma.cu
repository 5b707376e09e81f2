// One-token FP8 GEMVs on the tensor cores (fp8variant.go's mma and mmae;
// FT_FP8_VARIANT picks them): the three kernels, arguments and results of
// fp8gemv.cu's variants (gemv_fp8_v_<name>, gemv3_fp8_<name>,
// gemv_gateup_silu_fp8_<name>; out modes 0/1/2 of fp8_store), per-channel
// scales and power-of-two blocks of at least 64 (the Go side runs the
// scalar variants for 16- and 32-blocks and before sm_80).
//
// Why: the scalar variants spend ~55 instructions a lane on 16 weight
// bytes (E4M3 pairs to f16x2, each value to fp32, 16 FMAs, x from shared
// memory) and issue about one instruction every two cycles a scheduler
// (Nsight Compute, s20a): at the decode shapes they reach 36–80% of HBM's
// rate where the BF16 GEMVs, with a third of the instructions a byte,
// reach 65–95%. Here a lane spends on 16 weight bytes one 16-byte load,
// 8 cvt.rn.f16x2.e4m3x2 and 2 mma.sync (m16n8k16, f16 in, fp32
// accumulate), and one 16-byte shared load of x.
//
// Layout: a block of 8 warps owns a tile of 16 output rows (gate·up: 16
// rows of each matrix) and splits K between its warps: warp w takes the
// k-steps w, w + 8, … of 64 columns each. In a k-step lane l (g = l/4,
// t = l%4) loads columns 64s + 16t … + 15 of the tile's rows g and g + 8.
// Those 16 bytes of a row feed four mmas m = 0..3: the A fragment's
// columns 2t, 2t+1 are bytes 4m, 4m+1 of the lane's chunk and columns
// 2t+8, 2t+9 bytes 4m+2, 4m+3 (a permutation of k that the B fragment
// follows: its rows 2t, 2t+1, 2t+8, 2t+9 are x at the same columns).
// Every lane supplies x, whatever its B column (g), so the 8 columns of
// the product are alike and a lane's c[0] and c[2] are its rows' sums.
// The warps' sums meet in shared memory and are added in warp order
// (deterministic), then scaled (per channel) and stored.
//
// x: each block stages x[K] in shared memory as f16 (K·2 bytes), exact for
// bf16 values of magnitude 2^-14 … 65,280 (below that the f16 subnormals
// keep 2^-24 absolute); when some |x| reaches 65,536 the block scales x
// by 2^-e (e from the largest exponent) and the sums by 2^e, so nothing
// overflows (NaN and ±inf stay NaN and ±inf).
//
// Sums are fp32 on the tensor cores, in a different order from the scalar
// variants: not their bits, within the tests' tolerance of the CPU
// reference. Blocks of scales (B ≥ 64, so a k-step lies in one block)
// scale each k-step's mma sum before it is added.
//
// Loads: U k-steps a batch (U·2 16-byte loads a lane for one matrix, U·4
// for gate·up at half the U), the next batch issued before the current is
// computed; mmae issues the first batch before ft_pdl_wait (weights are
// never written during a step), mma after it.

// mma_f16: c[16×8] += a[16×16]·b[16×8] (f16 in, fp32 accumulate), the
// m16n8k16 fragments as in mma_bf16 (common.cuh).
__device__ __forceinline__ void mma_f16(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
		: "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		: "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
	__trap(); // the Go side never launches these kernels before sm_80
#endif
}

// fm_f16x8 is the 8 bf16 of v (low half first) times sc as f16.
__device__ __forceinline__ uint4 fm_f16x8(uint4 v, float sc) {
	const unsigned w[4] = {v.x, v.y, v.z, v.w};
	unsigned h[4];
#pragma unroll
	for (int j = 0; j < 4; j++) {
		const float lo = __uint_as_float(w[j] << 16) * sc, hi = __uint_as_float(w[j] & 0xffff0000u) * sc;
		asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(h[j]) : "f"(hi), "f"(lo));
	}
	return make_uint4(h[0], h[1], h[2], h[3]);
}

// fm_maxbits is the largest of the 8 bf16 magnitudes of v as bits (the
// order of bf16 magnitudes; NaN above ±inf).
__device__ __forceinline__ unsigned fm_maxbits(uint4 v) {
	const unsigned w[4] = {v.x, v.y, v.z, v.w};
	unsigned m = 0;
#pragma unroll
	for (int j = 0; j < 4; j++) m = max(m, max(w[j] & 0x7fffu, (w[j] >> 16) & 0x7fffu));
	return m;
}

// FM_BIG is the smallest bf16 magnitude (bits) that f16 cannot hold: 65,536.
#define FM_BIG 0x4780u

// fm_stage_x writes x[K] (bf16, 16-byte aligned, K % 8 == 0) into xs as
// f16 (K/8 uint4), times 2^-e, and returns e: 0 unless some |x| ≥ 65,536,
// else E − 14 for the exponent E of the largest |x| (so every scaled value
// is below 2^15). red holds 8 words. Ends at a block barrier.
__device__ __forceinline__ int fm_stage_x(uint4* xs, const bf16_t* __restrict__ x, int K, unsigned* red) {
	const uint4* x8 = reinterpret_cast<const uint4*>(x);
	const int n = K >> 3;
	int big = 0;
#pragma unroll 4
	for (int f = threadIdx.x; f < n; f += blockDim.x) {
		const uint4 v = __ldg(x8 + f);
		big |= fm_maxbits(v) >= FM_BIG;
		xs[f] = fm_f16x8(v, 1.f);
	}
	if (!__syncthreads_or(big)) return 0;
	unsigned m = 0;
	for (int f = threadIdx.x; f < n; f += blockDim.x) m = max(m, fm_maxbits(__ldg(x8 + f)));
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
	if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
	__syncthreads();
	m = 0;
	for (int w = 0; w < (int)(blockDim.x >> 5); w++) m = max(m, red[w]);
	const int e = (int)(m >> 7) - 127 - 14; // ≥ 2: m ≥ FM_BIG
	const float sc = __int_as_float((127 - e) << 23);
	for (int f = threadIdx.x; f < n; f += blockDim.x) xs[f] = fm_f16x8(__ldg(x8 + f), sc);
	__syncthreads();
	return e;
}

// fm_load loads batch b of a warp's k-steps (s = w + 8(bU + u), u < U) of
// the lane's NR weight rows wr: columns 64s + 16t … + 15, zeros past K.
template <int NR, int U, int DIAG>
__device__ __forceinline__ void fm_load(uint4 (&a)[U][NR], const unsigned char* const* wr, int K, int w, int t, int b) {
#pragma unroll
	for (int u = 0; u < U; u++) {
		if (DIAG & 1) { // timing diagnostic: the block round's bytes, each warp load 512 contiguous bytes of one row (wrong sums)
			const int lane = threadIdx.x & 31, j = b * U + u, k = 512 * j + 16 * lane;
			const unsigned char* base = wr[0] - (usize)(lane >> 2) * K;
#pragma unroll
			for (int r = 0; r < NR; r++)
				a[u][r] = k < K ? __ldg(reinterpret_cast<const uint4*>(base + (usize)(2 * w + r) * K + k)) : make_uint4(0u, 0u, 0u, 0u);
			continue;
		}
		const int k = (w + 8 * (b * U + u)) * 64 + 16 * t;
#pragma unroll
		for (int r = 0; r < NR; r++)
			a[u][r] = k < K ? __ldg(reinterpret_cast<const uint4*>(wr[r] + k)) : make_uint4(0u, 0u, 0u, 0u);
	}
}

// fm_compute adds batch b (loaded: a) to the sums of the lane's NR rows
// (rows 2p and 2p+1 of wr: a tile's rows g and g + 8): per k-step, four
// mmas in two chains (even and odd m; c[0] is row g's product, c[2] row
// g + 8's), their sum times the rows' block scales (sc, srow; bshift ≥ 2,
// B ≥ 64) or, per channel, as it is, added to sum[2p] and sum[2p+1].
template <int NR, int U>
__device__ __forceinline__ void fm_compute(float* sum, const uint4 (&a)[U][NR], const uint4* xs, int K, int w, int t, int b,
		const void* const* sc, int sdt, const usize* srow, int bshift) {
#pragma unroll
	for (int u = 0; u < U; u++) {
		const int s = w + 8 * (b * U + u);
		if (s * 64 >= K) break; // the warp's k-steps end (the same for all its lanes)
		const int k = s * 64 + 16 * t;
		uint4 x0 = make_uint4(0u, 0u, 0u, 0u), x1 = x0;
		if (k < K) {
			x0 = xs[k >> 3];
			x1 = xs[(k >> 3) + 1];
		}
		const unsigned xh[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
		for (int p = 0; p < NR / 2; p++) {
			const uint4 ra = a[u][2 * p], rb = a[u][2 * p + 1];
			const unsigned wa[4] = {ra.x, ra.y, ra.z, ra.w}, wb[4] = {rb.x, rb.y, rb.z, rb.w};
			float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
			for (int m = 0; m < 4; m++) {
				unsigned alo, ahi, blo, bhi;
				fp8x4_f16x2(wa[m], alo, ahi);
				fp8x4_f16x2(wb[m], blo, bhi);
				mma_f16(c[m & 1], alo, blo, ahi, bhi, xh[2 * m], xh[2 * m + 1]);
			}
			const float da = c[0][0] + c[1][0], db = c[0][2] + c[1][2];
			if (bshift >= 0) {
				const usize kb = (usize)(s >> (bshift - 2)); // columns 64s … lie in block 64s/B, B = 2^(bshift+4)
				sum[2 * p] = fmaf(da, load_as_f32(sc[2 * p], sdt, srow[2 * p] + kb), sum[2 * p]);
				sum[2 * p + 1] = fmaf(db, load_as_f32(sc[2 * p + 1], sdt, srow[2 * p + 1] + kb), sum[2 * p + 1]);
			} else {
				sum[2 * p] += da;
				sum[2 * p + 1] += db;
			}
		}
	}
}

// fm_body computes the lane's part of the sums of a tile's 16·NR/2 rows:
// wr are the lane's NR weight rows (rows g and g + 8 of each of NR/2
// matrices' tiles), sc and srow their scale bases and first block's scale
// index (fp8_srow). It leaves row i of pair p's sum from warp w in
// red[w·32 + 16p + i] (unscaled per channel), after a block barrier, and
// returns x's exponent shift e (fm_stage_x).
template <int NR, bool EARLY, int UB, int DIAG>
__device__ __forceinline__ int fm_body(float* red, unsigned* ured, const bf16_t* __restrict__ x, const unsigned char* const* wr,
		const void* const* sc, int sdt, const usize* srow, int K, int bshift) {
	extern __shared__ uint4 fm_xs[];
	constexpr int U = UB / (NR / 2) > 0 ? UB / (NR / 2) : 1;
	const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, t = lane & 3;
	const int nks = (K + 63) >> 6;
	const int J = w < nks ? (nks - w + 7) >> 3 : 0; // the warp's k-steps
	const int nb = (J + U - 1) / U;
	uint4 a0[U][NR], a1[U][NR];
	if (EARLY && nb > 0) fm_load<NR, U, DIAG>(a0, wr, K, w, t, 0);
	ft_pdl_wait();
	if (!EARLY && nb > 0) fm_load<NR, U, DIAG>(a0, wr, K, w, t, 0);
	const int e = (DIAG & 2) ? 0 : fm_stage_x(fm_xs, x, K, ured); // DIAG 2: timing without x (wrong sums)
	float sum[NR] = {};
	for (int b = 0; b < nb; b += 2) {
		if (b + 1 < nb) fm_load<NR, U, DIAG>(a1, wr, K, w, t, b + 1);
		fm_compute<NR, U>(sum, a0, fm_xs, K, w, t, b, sc, sdt, srow, bshift);
		if (b + 1 >= nb) break;
		if (b + 2 < nb) fm_load<NR, U, DIAG>(a0, wr, K, w, t, b + 2);
		fm_compute<NR, U>(sum, a1, fm_xs, K, w, t, b + 1, sc, sdt, srow, bshift);
	}
	if (t == 0) {
		const int g = lane >> 2;
#pragma unroll
		for (int p = 0; p < NR / 2; p++) {
			red[w * 32 + 16 * p + g] = sum[2 * p];
			red[w * 32 + 16 * p + g + 8] = sum[2 * p + 1];
		}
	}
	__syncthreads();
	return e;
}

// fm_total is row i of pair p's sum over the block's 8 warps, in warp
// order, times 2^e.
__device__ __forceinline__ float fm_total(const float* red, int p, int i, int e) {
	float s = 0.f;
#pragma unroll
	for (int w = 0; w < 8; w++) s += red[w * 32 + 16 * p + i];
	return e ? s * __int_as_float((127 + e) << 23) : s;
}

// gemv_fp8_v_mma_body: gemv_fp8_v_body's result (y bf16, fp32, or added to
// fp32 y: fp8_store) for the tile of rows 16·blockIdx.x … (rows past N
// read row N − 1 and store nothing).
template <bool EARLY, int UB, int DIAG = 0>
__device__ __forceinline__ void gemv_fp8_v_mma_body(void* y, int out_f32, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w, const void* __restrict__ scale, int sdt, int N, int K, int bshift, int sstride) {
	__shared__ float red[8 * 32];
	__shared__ unsigned ured[8];
	const int r0 = blockIdx.x * 16, g = (threadIdx.x & 31) >> 2;
	const unsigned char* wr[2];
	const void* sc[2] = {scale, scale};
	usize srow[2];
#pragma unroll
	for (int r = 0; r < 2; r++) {
		const int row = min(r0 + g + 8 * r, N - 1);
		wr[r] = w + (usize)row * K;
		srow[r] = fp8_srow(row, bshift, sstride);
	}
	const int e = fm_body<2, EARLY, UB, DIAG>(red, ured, x, wr, sc, sdt, srow, K, bshift);
	const int i = threadIdx.x, row = r0 + i;
	if (i < 16 && row < N) fp8_store(y, out_f32, row, fm_total(red, 0, i, e) * fp8_row_scale(scale, sdt, row, bshift));
}

// fm_qkv_row maps row t of q, k and v stacked (t < N0 + N1 + N2) to its
// matrix j and row within it.
__device__ __forceinline__ int fm_qkv_row(int t, int N0, int N1, int& j) {
	j = t < N0 ? 0 : t < N0 + N1 ? 1 : 2;
	return j == 0 ? t : j == 1 ? t - N0 : t - N0 - N1;
}

// gemv3_fp8_mma_body: gemv3_fp8_body's result for the tile of stacked rows
// 16·blockIdx.x … (a tile may straddle two matrices: each row takes its
// own matrix's scales).
template <bool EARLY, int UB, int DIAG = 0>
__device__ __forceinline__ void gemv3_fp8_mma_body(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2,
		const void* __restrict__ s0, const void* __restrict__ s1, const void* __restrict__ s2, int sdt,
		int N0, int N1, int N2, int K, int bshift, int sstride) {
	__shared__ float red[8 * 32];
	__shared__ unsigned ured[8];
	const int T = N0 + N1 + N2;
	const int r0 = blockIdx.x * 16, g = (threadIdx.x & 31) >> 2;
	const unsigned char* const ws[3] = {w0, w1, w2};
	const void* const ss[3] = {s0, s1, s2};
	const unsigned char* wr[2];
	const void* sc[2];
	usize srow[2];
#pragma unroll
	for (int r = 0; r < 2; r++) {
		int j;
		const int row = fm_qkv_row(min(r0 + g + 8 * r, T - 1), N0, N1, j);
		wr[r] = ws[j] + (usize)row * K;
		sc[r] = ss[j];
		srow[r] = fp8_srow(row, bshift, sstride);
	}
	const int e = fm_body<2, EARLY, UB, DIAG & 2>(red, ured, x, wr, sc, sdt, srow, K, bshift);
	const int i = threadIdx.x;
	if (i < 16 && r0 + i < T) {
		int j;
		const int row = fm_qkv_row(r0 + i, N0, N1, j);
		bf16_t* const ys[3] = {y0, y1, y2};
		ys[j][row] = f2bf(fm_total(red, 0, i, e) * fp8_row_scale(ss[j], sdt, row, bshift));
	}
}

// gemv_gateup_silu_fp8_mma_body: gemv_gateup_silu_fp8_body's result for
// rows 16·blockIdx.x … of gate and up.
template <bool EARLY, int UB, int DIAG = 0>
__device__ __forceinline__ void gemv_gateup_silu_fp8_mma_body(bf16_t* act, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu,
		const void* __restrict__ sg, const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride) {
	__shared__ float red[8 * 32];
	__shared__ unsigned ured[8];
	const int r0 = blockIdx.x * 16, g = (threadIdx.x & 31) >> 2;
	const unsigned char* wr[4];
	const void* sc[4] = {sg, sg, su, su};
	usize srow[4];
#pragma unroll
	for (int r = 0; r < 2; r++) {
		const int row = min(r0 + g + 8 * r, N - 1);
		wr[r] = wg + (usize)row * K;
		wr[2 + r] = wu + (usize)row * K;
		srow[r] = srow[2 + r] = fp8_srow(row, bshift, sstride);
	}
	const int e = fm_body<4, EARLY, UB, DIAG & 2>(red, ured, x, wr, sc, sdt, srow, K, bshift);
	const int i = threadIdx.x, row = r0 + i;
	if (i < 16 && row < N) {
		const float gv = fm_total(red, 0, i, e) * fp8_row_scale(sg, sdt, row, bshift);
		const float uv = fm_total(red, 1, i, e) * fp8_row_scale(su, sdt, row, bshift);
		act[row] = f2bf(gv / (1.f + expf(-gv)) * uv);
	}
}

// The variants (fp8variant.go's names): EARLY (e) loads the first batch
// before ft_pdl_wait; UB k-steps a batch for one matrix (gate·up UB/2);
// __launch_bounds__' second number caps the registers so that that many
// blocks of 256 threads fit an SM.

// gemv_fp8_v_mma: gemv_fp8_v on the tensor cores (gemv_fp8_v_mma_body), first weights after the wait, 4 k-steps a batch (gate·up 2), 2 blocks an SM.
extern "C" __global__ void __launch_bounds__(256, 2) gemv_fp8_v_mma(void* y, int out_f32, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w, const void* __restrict__ scale, int sdt, int N, int K, int bshift, int sstride) {
	gemv_fp8_v_mma_body<false, 4>(y, out_f32, x, w, scale, sdt, N, K, bshift, sstride);
}

// gemv3_fp8_mma: gemv3_fp8 on the tensor cores (gemv3_fp8_mma_body), first weights after the wait, 4 k-steps a batch (gate·up 2), 2 blocks an SM.
extern "C" __global__ void __launch_bounds__(256, 2) gemv3_fp8_mma(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2,
		const void* __restrict__ s0, const void* __restrict__ s1, const void* __restrict__ s2, int sdt,
		int N0, int N1, int N2, int K, int bshift, int sstride) {
	gemv3_fp8_mma_body<false, 4>(y0, y1, y2, x, w0, w1, w2, s0, s1, s2, sdt, N0, N1, N2, K, bshift, sstride);
}

// gemv_gateup_silu_fp8_mma: gemv_gateup_silu_fp8 on the tensor cores (gemv_gateup_silu_fp8_mma_body), first weights after the wait, 4 k-steps a batch (gate·up 2), 2 blocks an SM.
extern "C" __global__ void __launch_bounds__(256, 2) gemv_gateup_silu_fp8_mma(bf16_t* act, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu,
		const void* __restrict__ sg, const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride) {
	gemv_gateup_silu_fp8_mma_body<false, 4>(act, x, wg, wu, sg, su, sdt, N, K, bshift, sstride);
}

// gemv_fp8_v_mmae: gemv_fp8_v on the tensor cores (gemv_fp8_v_mma_body), first weights before the wait, 4 k-steps a batch (gate·up 2), 2 blocks an SM.
extern "C" __global__ void __launch_bounds__(256, 2) gemv_fp8_v_mmae(void* y, int out_f32, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w, const void* __restrict__ scale, int sdt, int N, int K, int bshift, int sstride) {
	gemv_fp8_v_mma_body<true, 4>(y, out_f32, x, w, scale, sdt, N, K, bshift, sstride);
}

// gemv3_fp8_mmae: gemv3_fp8 on the tensor cores (gemv3_fp8_mma_body), first weights before the wait, 4 k-steps a batch (gate·up 2), 2 blocks an SM.
extern "C" __global__ void __launch_bounds__(256, 2) gemv3_fp8_mmae(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2,
		const void* __restrict__ s0, const void* __restrict__ s1, const void* __restrict__ s2, int sdt,
		int N0, int N1, int N2, int K, int bshift, int sstride) {
	gemv3_fp8_mma_body<true, 4>(y0, y1, y2, x, w0, w1, w2, s0, s1, s2, sdt, N0, N1, N2, K, bshift, sstride);
}

// gemv_gateup_silu_fp8_mmae: gemv_gateup_silu_fp8 on the tensor cores (gemv_gateup_silu_fp8_mma_body), first weights before the wait, 4 k-steps a batch (gate·up 2), 2 blocks an SM.
extern "C" __global__ void __launch_bounds__(256, 2) gemv_gateup_silu_fp8_mmae(bf16_t* act, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu,
		const void* __restrict__ sg, const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride) {
	gemv_gateup_silu_fp8_mma_body<true, 4>(act, x, wg, wu, sg, su, sdt, N, K, bshift, sstride);
}

// gemv_fp8_v_m2e3: gemv_fp8_v on the tensor cores (gemv_fp8_v_mma_body), first weights before the wait, 2 k-steps a batch (gate·up 1), registers for 3 blocks an SM.
extern "C" __global__ void __launch_bounds__(256, 3) gemv_fp8_v_m2e3(void* y, int out_f32, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w, const void* __restrict__ scale, int sdt, int N, int K, int bshift, int sstride) {
	gemv_fp8_v_mma_body<true, 2>(y, out_f32, x, w, scale, sdt, N, K, bshift, sstride);
}

// gemv3_fp8_m2e3: gemv3_fp8 on the tensor cores (gemv3_fp8_mma_body), first weights before the wait, 2 k-steps a batch (gate·up 1), registers for 3 blocks an SM.
extern "C" __global__ void __launch_bounds__(256, 3) gemv3_fp8_m2e3(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2,
		const void* __restrict__ s0, const void* __restrict__ s1, const void* __restrict__ s2, int sdt,
		int N0, int N1, int N2, int K, int bshift, int sstride) {
	gemv3_fp8_mma_body<true, 2>(y0, y1, y2, x, w0, w1, w2, s0, s1, s2, sdt, N0, N1, N2, K, bshift, sstride);
}

// gemv_gateup_silu_fp8_m2e3: gemv_gateup_silu_fp8 on the tensor cores (gemv_gateup_silu_fp8_mma_body), first weights before the wait, 2 k-steps a batch (gate·up 1), registers for 3 blocks an SM.
extern "C" __global__ void __launch_bounds__(256, 3) gemv_gateup_silu_fp8_m2e3(bf16_t* act, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu,
		const void* __restrict__ sg, const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride) {
	gemv_gateup_silu_fp8_mma_body<true, 2>(act, x, wg, wu, sg, su, sdt, N, K, bshift, sstride);
}

// gemv_fp8_v_m2e4: gemv_fp8_v on the tensor cores (gemv_fp8_v_mma_body), first weights before the wait, 2 k-steps a batch (gate·up 1), registers for 4 blocks an SM.
extern "C" __global__ void __launch_bounds__(256, 4) gemv_fp8_v_m2e4(void* y, int out_f32, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w, const void* __restrict__ scale, int sdt, int N, int K, int bshift, int sstride) {
	gemv_fp8_v_mma_body<true, 2>(y, out_f32, x, w, scale, sdt, N, K, bshift, sstride);
}

// gemv3_fp8_m2e4: gemv3_fp8 on the tensor cores (gemv3_fp8_mma_body), first weights before the wait, 2 k-steps a batch (gate·up 1), registers for 4 blocks an SM.
extern "C" __global__ void __launch_bounds__(256, 4) gemv3_fp8_m2e4(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2,
		const void* __restrict__ s0, const void* __restrict__ s1, const void* __restrict__ s2, int sdt,
		int N0, int N1, int N2, int K, int bshift, int sstride) {
	gemv3_fp8_mma_body<true, 2>(y0, y1, y2, x, w0, w1, w2, s0, s1, s2, sdt, N0, N1, N2, K, bshift, sstride);
}

// gemv_gateup_silu_fp8_m2e4: gemv_gateup_silu_fp8 on the tensor cores (gemv_gateup_silu_fp8_mma_body), first weights before the wait, 2 k-steps a batch (gate·up 1), registers for 4 blocks an SM.
extern "C" __global__ void __launch_bounds__(256, 4) gemv_gateup_silu_fp8_m2e4(bf16_t* act, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu,
		const void* __restrict__ sg, const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride) {
	gemv_gateup_silu_fp8_mma_body<true, 2>(act, x, wg, wu, sg, su, sdt, N, K, bshift, sstride);
}

// gemv_fp8_v_m4e3: gemv_fp8_v on the tensor cores (gemv_fp8_v_mma_body), first weights before the wait, 4 k-steps a batch (gate·up 2), registers for 3 blocks an SM.
extern "C" __global__ void __launch_bounds__(256, 3) gemv_fp8_v_m4e3(void* y, int out_f32, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w, const void* __restrict__ scale, int sdt, int N, int K, int bshift, int sstride) {
	gemv_fp8_v_mma_body<true, 4>(y, out_f32, x, w, scale, sdt, N, K, bshift, sstride);
}

// gemv3_fp8_m4e3: gemv3_fp8 on the tensor cores (gemv3_fp8_mma_body), first weights before the wait, 4 k-steps a batch (gate·up 2), registers for 3 blocks an SM.
extern "C" __global__ void __launch_bounds__(256, 3) gemv3_fp8_m4e3(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2,
		const void* __restrict__ s0, const void* __restrict__ s1, const void* __restrict__ s2, int sdt,
		int N0, int N1, int N2, int K, int bshift, int sstride) {
	gemv3_fp8_mma_body<true, 4>(y0, y1, y2, x, w0, w1, w2, s0, s1, s2, sdt, N0, N1, N2, K, bshift, sstride);
}

// gemv_gateup_silu_fp8_m4e3: gemv_gateup_silu_fp8 on the tensor cores (gemv_gateup_silu_fp8_mma_body), first weights before the wait, 4 k-steps a batch (gate·up 2), registers for 3 blocks an SM.
extern "C" __global__ void __launch_bounds__(256, 3) gemv_gateup_silu_fp8_m4e3(bf16_t* act, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu,
		const void* __restrict__ sg, const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride) {
	gemv_gateup_silu_fp8_mma_body<true, 4>(act, x, wg, wu, sg, su, sdt, N, K, bshift, sstride);
}

// gemv_fp8_v_xmmc: a timing diagnostic of mmae, wrong sums (each warp load 512 contiguous bytes of one row; s25d).
extern "C" __global__ void __launch_bounds__(256, 2) gemv_fp8_v_xmmc(void* y, int out_f32, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w, const void* __restrict__ scale, int sdt, int N, int K, int bshift, int sstride) {
	gemv_fp8_v_mma_body<true, 4, 1>(y, out_f32, x, w, scale, sdt, N, K, bshift, sstride);
}

// gemv3_fp8_xmmc: a timing diagnostic of mmae, wrong sums (each warp load 512 contiguous bytes of one row; s25d).
extern "C" __global__ void __launch_bounds__(256, 2) gemv3_fp8_xmmc(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2,
		const void* __restrict__ s0, const void* __restrict__ s1, const void* __restrict__ s2, int sdt,
		int N0, int N1, int N2, int K, int bshift, int sstride) {
	gemv3_fp8_mma_body<true, 4, 1>(y0, y1, y2, x, w0, w1, w2, s0, s1, s2, sdt, N0, N1, N2, K, bshift, sstride);
}

// gemv_gateup_silu_fp8_xmmc: a timing diagnostic of mmae, wrong sums (each warp load 512 contiguous bytes of one row; s25d).
extern "C" __global__ void __launch_bounds__(256, 2) gemv_gateup_silu_fp8_xmmc(bf16_t* act, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu,
		const void* __restrict__ sg, const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride) {
	gemv_gateup_silu_fp8_mma_body<true, 4, 1>(act, x, wg, wu, sg, su, sdt, N, K, bshift, sstride);
}

// gemv_fp8_v_xmmn: a timing diagnostic of mmae, wrong sums (no x staging; s25d).
extern "C" __global__ void __launch_bounds__(256, 2) gemv_fp8_v_xmmn(void* y, int out_f32, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w, const void* __restrict__ scale, int sdt, int N, int K, int bshift, int sstride) {
	gemv_fp8_v_mma_body<true, 4, 2>(y, out_f32, x, w, scale, sdt, N, K, bshift, sstride);
}

// gemv3_fp8_xmmn: a timing diagnostic of mmae, wrong sums (no x staging; s25d).
extern "C" __global__ void __launch_bounds__(256, 2) gemv3_fp8_xmmn(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2,
		const void* __restrict__ s0, const void* __restrict__ s1, const void* __restrict__ s2, int sdt,
		int N0, int N1, int N2, int K, int bshift, int sstride) {
	gemv3_fp8_mma_body<true, 4, 2>(y0, y1, y2, x, w0, w1, w2, s0, s1, s2, sdt, N0, N1, N2, K, bshift, sstride);
}

// gemv_gateup_silu_fp8_xmmn: a timing diagnostic of mmae, wrong sums (no x staging; s25d).
extern "C" __global__ void __launch_bounds__(256, 2) gemv_gateup_silu_fp8_xmmn(bf16_t* act, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu,
		const void* __restrict__ sg, const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride) {
	gemv_gateup_silu_fp8_mma_body<true, 4, 2>(act, x, wg, wu, sg, su, sdt, N, K, bshift, sstride);
}

// gemv_fp8_v_xmmcn: a timing diagnostic of mmae, wrong sums (both; s25d).
extern "C" __global__ void __launch_bounds__(256, 2) gemv_fp8_v_xmmcn(void* y, int out_f32, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w, const void* __restrict__ scale, int sdt, int N, int K, int bshift, int sstride) {
	gemv_fp8_v_mma_body<true, 4, 3>(y, out_f32, x, w, scale, sdt, N, K, bshift, sstride);
}

// gemv3_fp8_xmmcn: a timing diagnostic of mmae, wrong sums (both; s25d).
extern "C" __global__ void __launch_bounds__(256, 2) gemv3_fp8_xmmcn(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2,
		const void* __restrict__ s0, const void* __restrict__ s1, const void* __restrict__ s2, int sdt,
		int N0, int N1, int N2, int K, int bshift, int sstride) {
	gemv3_fp8_mma_body<true, 4, 3>(y0, y1, y2, x, w0, w1, w2, s0, s1, s2, sdt, N0, N1, N2, K, bshift, sstride);
}

// gemv_gateup_silu_fp8_xmmcn: a timing diagnostic of mmae, wrong sums (both; s25d).
extern "C" __global__ void __launch_bounds__(256, 2) gemv_gateup_silu_fp8_xmmcn(bf16_t* act, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu,
		const void* __restrict__ sg, const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride) {
	gemv_gateup_silu_fp8_mma_body<true, 4, 3>(act, x, wg, wu, sg, su, sdt, N, K, bshift, sstride);
}
