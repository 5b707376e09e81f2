// One-token FP8 GEMVs on the tensor cores (fp8variant.go's mm2 and mm4,
// auto's picks; FT_FP8_VARIANT forces one): the three kernels, arguments and results of
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
// 8 cvt.rn.f16x2.e4m3x2 (in 4 calls) and 4 mma.sync (m16n8k16, f16 in,
// fp32 accumulate) shared with the other row it holds, and two 16-byte
// shared loads of x.
//
// Layout: a block of 8 warps owns a tile of 16 output rows (gate·up: 8
// rows of gate and the same 8 of up, so that each lane holds both of its
// row's sums) and splits K between its warps: warp w takes the k-steps
// s = w, w + 8, … of 128 columns each. In a k-step lane l (g = l/4,
// t = l%4) loads, of the tile's rows g and g + 8, the 16 bytes at columns
// 128s + 64p + 16t for p = 0, 1 (so two loads of a row cover its 128
// bytes). Each 16-byte piece feeds four mmas m = 0..3: the A fragment's
// columns 2t, 2t+1 are bytes 4m, 4m+1 of the lane's piece and columns
// 2t+8, 2t+9 bytes 4m+2, 4m+3 (a permutation of k that the B fragment
// follows: its rows 2t, 2t+1, 2t+8, 2t+9 are x at the same columns).
// Every lane supplies x, whatever its B column (g), so the 8 columns of
// the product are alike and a lane's c[0] and c[2] are its rows' sums.
// The warps' sums meet in shared memory and are added in warp order
// (deterministic), then scaled (per channel) and stored.
//
// x: each warp stages the columns of its own k-steps in shared memory as
// f16 (no block barrier before the products), exact for bf16 values of
// magnitude 2^-14 … 65,280 (below that the f16 subnormals keep 2^-24
// absolute); when some |x| of its columns reaches 65,536 the warp scales
// them by 2^-e (e from the largest exponent) and its sums by 2^e, so
// nothing overflows (NaN and ±inf stay NaN and ±inf).
//
// Sums are fp32 on the tensor cores, in a different order from the scalar
// variants: not their bits, within the tests' tolerance of the CPU
// reference. With blocks of scales (B ≥ 64, so each 64-column piece lies in
// one block) each piece's mma sum is scaled before it is added.
//
// Loads: two k-steps of weights (4 16-byte loads a lane each) are issued
// before x is staged, and each k-step's buffer is refilled with the
// warp's k-step after next as soon as it is computed, so one or two are
// always in flight (mm2; mm4: four, more registers), the first ones issued
// before ft_pdl_wait (weights are never written during a step). mm2 caps
// the registers for 3 blocks an SM, mm4 for 2. s25e: issuing them after
// the wait (mm2l) and mm2's two k-steps with 2 blocks an SM (mm2x) were
// slower.
//
// History (bench/RESULTS.md, s25a–s25d): a first layout (k-steps of 64
// columns, one load a row, x staged by the whole block behind a barrier,
// 16-row gate·up tiles) ran 5–15% slower than the scalar variants; timing
// diagnostics put ~11% of its down projection on the block's x staging,
// ~4% on its loads touching 64 bytes of 8 rows, and gate·up's 896 tiles on
// 264 block slots (3.4 waves) on top.

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

// fm_stage_warp writes, for warp w's k-steps s = w + 8j (j < J), columns
// 128s … 128s + 127 of x (bf16, 16-byte aligned, K % 8 == 0) into xw[16j …
// 16j + 15] as f16 (8 a uint4; zeros past K), times 2^-e, and returns e: 0
// unless some |x| among them is ≥ 65,536, else E − 14 for the exponent E of
// the largest (so every scaled value is below 2^15). Ends at __syncwarp.
__device__ __forceinline__ int fm_stage_warp(uint4* xw, const bf16_t* __restrict__ x, int K, int w, int J) {
	const uint4* x8 = reinterpret_cast<const uint4*>(x);
	const int lane = threadIdx.x & 31, n8 = K >> 3;
	int big = 0;
#pragma unroll 4
	for (int i = lane; i < 16 * J; i += 32) {
		const int f = (w + 8 * (i >> 4)) * 16 + (i & 15);
		const uint4 v = f < n8 ? __ldg(x8 + f) : make_uint4(0u, 0u, 0u, 0u);
		big |= fm_maxbits(v) >= FM_BIG;
		xw[i] = fm_f16x8(v, 1.f);
	}
	if (!__any_sync(0xffffffffu, big)) {
		__syncwarp();
		return 0;
	}
	unsigned m = 0;
	for (int i = lane; i < 16 * J; i += 32) {
		const int f = (w + 8 * (i >> 4)) * 16 + (i & 15);
		if (f < n8) m = max(m, fm_maxbits(__ldg(x8 + f)));
	}
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
	const int e = (int)(m >> 7) - 127 - 14; // ≥ 2: m ≥ FM_BIG
	const float sc = __int_as_float((127 - e) << 23);
	for (int i = lane; i < 16 * J; i += 32) {
		const int f = (w + 8 * (i >> 4)) * 16 + (i & 15);
		xw[i] = fm_f16x8(f < n8 ? __ldg(x8 + f) : make_uint4(0u, 0u, 0u, 0u), sc);
	}
	__syncwarp();
	return e;
}

// fm_xnw8 is columns 8f … 8f + 7 of x·nw for the fp32 residual x4 and
// the norm's bf16 weight n8 (zeros from f = c8, past K), their squares of
// x added to sq (rms_sq4's order).
__device__ __forceinline__ void fm_xnw8(float (&v)[8], float& sq, const float4* __restrict__ x4, const uint4* __restrict__ n8,
		int f, int c8) {
	if (f >= c8) {
#pragma unroll
		for (int j = 0; j < 8; j++) v[j] = 0.f;
		return;
	}
	const float4 a = x4[2 * f], b = x4[2 * f + 1];
	const uint4 q = __ldg(n8 + f);
	sq = rms_sq4(rms_sq4(sq, a), b);
	const unsigned qw[4] = {q.x, q.y, q.z, q.w};
	const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
	for (int j = 0; j < 4; j++) {
		v[2 * j] = xv[2 * j] * __uint_as_float(qw[j] << 16);
		v[2 * j + 1] = xv[2 * j + 1] * __uint_as_float(qw[j] & 0xffff0000u);
	}
}

// fm_f16x8f is the 8 fp32 values of v times sc as f16.
__device__ __forceinline__ uint4 fm_f16x8f(const float (&v)[8], float sc) {
	unsigned h[4];
#pragma unroll
	for (int j = 0; j < 4; j++) asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(h[j]) : "f"(v[2 * j + 1] * sc), "f"(v[2 * j] * sc));
	return make_uint4(h[0], h[1], h[2], h[3]);
}

// fm_stage_warp_norm is fm_stage_warp for a folded RMSNorm: x is the fp32
// residual and nw the norm's bf16 weight, and warp w stages f16(x·nw) of
// its columns (the norm's 1/rms is applied to the finished sums, so no
// block barrier comes before the products), times 2^-e (e as in
// fm_stage_warp, here from the fp32 products: 0 unless one exceeds f16's
// 65,504). ss[w] gets the warp's Σx² over its columns (rms_sq4's fp32
// sums; lane order, then the warp's butterfly). Ends at __syncwarp.
__device__ __forceinline__ int fm_stage_warp_norm(uint4* xw, float* ss, const float* __restrict__ x,
		const bf16_t* __restrict__ nw, int K, int w, int J) {
	const float4* x4 = reinterpret_cast<const float4*>(x);
	const uint4* n8 = reinterpret_cast<const uint4*>(nw);
	const int lane = threadIdx.x & 31, c8 = K >> 3;
	float sq = 0.f;
	unsigned m = 0;
	for (int i = lane; i < 16 * J; i += 32) {
		float v[8];
		fm_xnw8(v, sq, x4, n8, (w + 8 * (i >> 4)) * 16 + (i & 15), c8);
#pragma unroll
		for (int j = 0; j < 8; j++) m = max(m, __float_as_uint(v[j]) & 0x7fffffffu);
		xw[i] = fm_f16x8f(v, 1.f);
	}
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		sq += __shfl_xor_sync(0xffffffffu, sq, o);
		m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
	}
	if (lane == 0) ss[w] = sq;
	if (m <= 0x477fe000u) { // every |x·nw| ≤ 65,504 (NaN's bits are above)
		__syncwarp();
		return 0;
	}
	const int e = (int)(m >> 23) - 127 - 14; // ≥ 1
	const float sc = __int_as_float((127 - e) << 23);
	float unused = 0.f;
	for (int i = lane; i < 16 * J; i += 32) {
		float v[8];
		fm_xnw8(v, unused, x4, n8, (w + 8 * (i >> 4)) * 16 + (i & 15), c8);
		xw[i] = fm_f16x8f(v, sc);
	}
	__syncwarp();
	return e;
}

// fm_rstd is the folded norm's 1/rms: rms_scale of the warps' Σx² (ss,
// added in warp order) over K columns.
__device__ __forceinline__ float fm_rstd(const float* ss, int K, float eps) {
	float s = 0.f;
#pragma unroll
	for (int w = 0; w < 8; w++) s += ss[w];
	return rms_scale(s, K, eps);
}

// fm_load loads k-step s of the lane's two weight rows wr: a[r][p] is
// columns 128s + 64p + 16t … + 15 of row r, zeros past K.
__device__ __forceinline__ void fm_load(uint4 (&a)[2][2], const unsigned char* const* wr, int K, int s, int t) {
#pragma unroll
	for (int p = 0; p < 2; p++) {
		const int k = 128 * s + 64 * p + 16 * t;
#pragma unroll
		for (int r = 0; r < 2; r++)
			a[r][p] = k < K ? __ldg(reinterpret_cast<const uint4*>(wr[r] + k)) : make_uint4(0u, 0u, 0u, 0u);
	}
}

// fm_compute adds k-step s (loaded: a; j its index among the warp's, for
// its x in xw) to sum[0] and sum[1], the lane's rows' sums: per 64-column
// piece p, four mmas in two chains (even and odd m; c[0] is the first
// row's product, c[2] the second's), their sum times the rows' block
// scales (sc, srow; bshift ≥ 2, B ≥ 64) or, per channel, as it is. A
// piece wholly past K (zeros) reads no scale: its block would lie past
// the row's last (s26f: the scale after a matrix's last, NaN, made its
// zero sum NaN).
__device__ __forceinline__ void fm_compute(float* sum, const uint4 (&a)[2][2], const uint4* xw, int j, int s, int t,
		const void* const* sc, int sdt, const usize* srow, int bshift, int K) {
#pragma unroll
	for (int p = 0; p < 2; p++) {
		const uint4 x0 = xw[16 * j + 8 * p + 2 * t], x1 = xw[16 * j + 8 * p + 2 * t + 1];
		const unsigned xh[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
		const unsigned wa[4] = {a[0][p].x, a[0][p].y, a[0][p].z, a[0][p].w};
		const unsigned wb[4] = {a[1][p].x, a[1][p].y, a[1][p].z, a[1][p].w};
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
			if (128 * s + 64 * p >= K) continue;
			const usize kb = (usize)((128 * s + 64 * p) >> (bshift + 4)); // B = 2^(bshift+4) ≥ 64
			sum[0] = fmaf(da, load_as_f32(sc[0], sdt, srow[0] + kb), sum[0]);
			sum[1] = fmaf(db, load_as_f32(sc[1], sdt, srow[1] + kb), sum[1]);
		} else {
			sum[0] += da;
			sum[1] += db;
		}
	}
}

// fm_body computes the lane's part of its two weight rows' sums (wr; sc
// and srow their scale bases and first block's scale index, fp8_srow) and
// leaves warp w's sums of the tile's rows i = g and g + 8 (times 2^e of
// its x) in red[16w + i], after a block barrier. NB k-steps of weights are
// in flight (registers a[NB]): the first NB issued before x is staged
// (before ft_pdl_wait when EARLY), each buffer refilled with the warp's
// k-step NB further on as soon as it is computed. Dynamic shared memory:
// 8 warps × 16 × ⌈⌈K/128⌉/8⌉ uint4.
//
// NORM: x is the fp32 residual and nw an RMSNorm's weight
// (fm_stage_warp_norm); the warps' Σx² are left in ss[0..7] as well.
template <bool EARLY, int NB, bool NORM = false>
__device__ __forceinline__ void fm_body(float* red, const void* __restrict__ x, const unsigned char* const* wr,
		const void* const* sc, int sdt, const usize* srow, int K, int bshift, float* ss = nullptr, const bf16_t* __restrict__ nw = nullptr) {
	extern __shared__ uint4 fm_xs[];
	const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, t = lane & 3;
	const int nks = (K + 127) >> 7;
	const int J = w < nks ? (nks - w + 7) >> 3 : 0; // the warp's k-steps
	uint4* xw = fm_xs + w * 16 * ((nks + 7) >> 3);
	uint4 a[NB][2][2];
	if (EARLY) {
#pragma unroll
		for (int q = 0; q < NB; q++)
			if (q < J) fm_load(a[q], wr, K, w + 8 * q, t);
	}
	ft_pdl_wait();
	if (!EARLY) {
#pragma unroll
		for (int q = 0; q < NB; q++)
			if (q < J) fm_load(a[q], wr, K, w + 8 * q, t);
	}
	const int e = NORM ? fm_stage_warp_norm(xw, ss, static_cast<const float*>(x), nw, K, w, J)
	                   : fm_stage_warp(xw, static_cast<const bf16_t*>(x), K, w, J);
	float sum[2] = {0.f, 0.f};
	for (int j0 = 0; j0 < J; j0 += NB) {
#pragma unroll
		for (int q = 0; q < NB; q++) {
			const int j = j0 + q;
			if (j >= J) break;
			fm_compute(sum, a[q], xw, j, w + 8 * j, t, sc, sdt, srow, bshift, K);
			if (j + NB < J) fm_load(a[q], wr, K, w + 8 * (j + NB), t);
		}
	}
	if (t == 0) {
		const int g = lane >> 2;
		const float f = e ? __int_as_float((127 + e) << 23) : 1.f;
		red[16 * w + g] = sum[0] * f;
		red[16 * w + g + 8] = sum[1] * f;
	}
	__syncthreads();
}

// fm_total is row i's sum over the block's 8 warps, in warp order.
__device__ __forceinline__ float fm_total(const float* red, int i) {
	float s = 0.f;
#pragma unroll
	for (int w = 0; w < 8; w++) s += red[16 * w + i];
	return s;
}

// gemv_fp8_v_mma_body: gemv_fp8_v_body's result (y bf16, fp32, or added to
// fp32 y: fp8_store) for the tile of rows 16·blockIdx.x … (rows past N
// read row N − 1 and store nothing).
template <bool EARLY, int NB>
__device__ __forceinline__ void gemv_fp8_v_mma_body(void* y, int out_f32, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w, const void* __restrict__ scale, int sdt, int N, int K, int bshift, int sstride) {
	__shared__ float red[8 * 16];
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
	fm_body<EARLY, NB>(red, x, wr, sc, sdt, srow, K, bshift);
	const int i = threadIdx.x, row = r0 + i;
	if (i < 16 && row < N) fp8_store(y, out_f32, row, fm_total(red, i) * fp8_row_scale(scale, sdt, row, bshift));
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
// NORM: x is the fp32 residual and the sums are of RMSNorm(x) with weight
// nw and eps (fm_stage_warp_norm, fm_rstd).
template <bool EARLY, int NB, bool NORM = false>
__device__ __forceinline__ void gemv3_fp8_mma_body(bf16_t* y0, bf16_t* y1, bf16_t* y2, const void* __restrict__ x,
		const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2,
		const void* __restrict__ s0, const void* __restrict__ s1, const void* __restrict__ s2, int sdt,
		int N0, int N1, int N2, int K, int bshift, int sstride, const bf16_t* __restrict__ nw = nullptr, float eps = 0.f) {
	__shared__ float red[8 * 16];
	__shared__ float ss[8];
	const int T = N0 + N1 + N2;
	const int r0 = blockIdx.x * 16, g = (threadIdx.x & 31) >> 2;
	const unsigned char* const ws[3] = {w0, w1, w2};
	const void* const sm[3] = {s0, s1, s2};
	const unsigned char* wr[2];
	const void* sc[2];
	usize srow[2];
#pragma unroll
	for (int r = 0; r < 2; r++) {
		int j;
		const int row = fm_qkv_row(min(r0 + g + 8 * r, T - 1), N0, N1, j);
		wr[r] = ws[j] + (usize)row * K;
		sc[r] = sm[j];
		srow[r] = fp8_srow(row, bshift, sstride);
	}
	fm_body<EARLY, NB, NORM>(red, x, wr, sc, sdt, srow, K, bshift, ss, nw);
	const int i = threadIdx.x;
	if (i < 16 && r0 + i < T) {
		int j;
		const int row = fm_qkv_row(r0 + i, N0, N1, j);
		bf16_t* const ys[3] = {y0, y1, y2};
		const float sum = NORM ? fm_total(red, i) * fm_rstd(ss, K, eps) : fm_total(red, i);
		ys[j][row] = f2bf(sum * fp8_row_scale(sm[j], sdt, row, bshift));
	}
}

// gemv_gateup_silu_fp8_mma_body: gemv_gateup_silu_fp8_body's result for
// rows 8·blockIdx.x … (the tile's rows g are gate's, its rows g + 8 up's).
// NORM as in gemv3_fp8_mma_body.
template <bool EARLY, int NB, bool NORM = false>
__device__ __forceinline__ void gemv_gateup_silu_fp8_mma_body(bf16_t* act, const void* __restrict__ x,
		const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu,
		const void* __restrict__ sg, const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride,
		const bf16_t* __restrict__ nw = nullptr, float eps = 0.f) {
	__shared__ float red[8 * 16];
	__shared__ float ss[8];
	const int r0 = blockIdx.x * 8, g = (threadIdx.x & 31) >> 2;
	const int row = min(r0 + g, N - 1);
	const unsigned char* wr[2] = {wg + (usize)row * K, wu + (usize)row * K};
	const void* sc[2] = {sg, su};
	const usize sr = fp8_srow(row, bshift, sstride);
	const usize srow[2] = {sr, sr};
	fm_body<EARLY, NB, NORM>(red, x, wr, sc, sdt, srow, K, bshift, ss, nw);
	const int i = threadIdx.x, r = r0 + i;
	if (i < 8 && r < N) {
		const float rs = NORM ? fm_rstd(ss, K, eps) : 1.f;
		const float gv = fm_total(red, i) * rs * fp8_row_scale(sg, sdt, r, bshift);
		const float uv = fm_total(red, 8 + i) * rs * fp8_row_scale(su, sdt, r, bshift);
		act[r] = f2bf(gv / (1.f + expf(-gv)) * uv);
	}
}

// The persistent forms (fp8variant.go's mp2, mp4; measured against mm2 and
// mm4 in session 28): block b takes the tiles b, b + gridDim.x, … of its
// kernel (a grid of at most one wave of resident blocks), stages x once
// (and, NORM, its Σx²), and keeps NB k-steps in flight a warp across its
// tiles: the first tile's before ft_pdl_wait, and each buffer, once
// computed, refilled with the warp's k-step NB further on, in the next tile
// when this one has no more. Why (bench/RESULTS.md, s27e's block trace):
// mm2's gate·up launch is 1,792 blocks in 4.5 waves of small blocks, each
// staging x and draining its loads before it ends, and ran ~12 µs a layer
// past its bytes' time. Takes K a multiple of 1,024·NB (every warp the same
// J k-steps a tile, J % NB == 0, so a buffer's k-step index is the same in
// every tile and the block barrier after each tile sits in uniform code);
// the Go side runs mm2/mm4 otherwise. Sums, scales and stores are the mm
// kernels' (the same bits).

// FmTileV is gemv_fp8_v_mma_body's tile: 16 rows of w (y as fp8_store).
struct FmTileV {
	void* y;
	int out;
	const unsigned char* w;
	const void* scale;
	int sdt, N, K, bshift, sstride;
	__device__ void lane(int tile, const unsigned char** wr, const void** sc, usize* srow) const {
		const int g = (threadIdx.x & 31) >> 2;
#pragma unroll
		for (int r = 0; r < 2; r++) {
			const int row = min(16 * tile + g + 8 * r, N - 1);
			wr[r] = w + (usize)row * K;
			sc[r] = scale;
			srow[r] = fp8_srow(row, bshift, sstride);
		}
	}
	__device__ void store(int tile, const float* red, float rs) const {
		const int i = threadIdx.x, row = 16 * tile + i;
		if (i < 16 && row < N) fp8_store(y, out, row, fm_total(red, i) * rs * fp8_row_scale(scale, sdt, row, bshift));
	}
};

// FmTile3 is gemv3_fp8_mma_body's tile: 16 of q, k and v's stacked rows.
struct FmTile3 {
	bf16_t *y0, *y1, *y2;
	const unsigned char *w0, *w1, *w2;
	const void *s0, *s1, *s2;
	int sdt, N0, N1, N2, K, bshift, sstride;
	__device__ void lane(int tile, const unsigned char** wr, const void** sc, usize* srow) const {
		const int g = (threadIdx.x & 31) >> 2, T = N0 + N1 + N2;
#pragma unroll
		for (int r = 0; r < 2; r++) {
			int j;
			const int row = fm_qkv_row(min(16 * tile + g + 8 * r, T - 1), N0, N1, j);
			wr[r] = (j == 0 ? w0 : j == 1 ? w1 : w2) + (usize)row * K;
			sc[r] = j == 0 ? s0 : j == 1 ? s1 : s2;
			srow[r] = fp8_srow(row, bshift, sstride);
		}
	}
	__device__ void store(int tile, const float* red, float rs) const {
		const int i = threadIdx.x;
		if (i < 16 && 16 * tile + i < N0 + N1 + N2) {
			int j;
			const int row = fm_qkv_row(16 * tile + i, N0, N1, j);
			const void* const sj = j == 0 ? s0 : j == 1 ? s1 : s2;
			bf16_t* const yj = j == 0 ? y0 : j == 1 ? y1 : y2;
			yj[row] = f2bf(fm_total(red, i) * rs * fp8_row_scale(sj, sdt, row, bshift));
		}
	}
};

// FmTileGU is gemv_gateup_silu_fp8_mma_body's tile: 8 rows of gate (the
// lanes' first row) and the same 8 of up (their second).
struct FmTileGU {
	bf16_t* act;
	const unsigned char *wg, *wu;
	const void *sg, *su;
	int sdt, N, K, bshift, sstride;
	__device__ void lane(int tile, const unsigned char** wr, const void** sc, usize* srow) const {
		const int row = min(8 * tile + ((threadIdx.x & 31) >> 2), N - 1);
		wr[0] = wg + (usize)row * K;
		wr[1] = wu + (usize)row * K;
		sc[0] = sg;
		sc[1] = su;
		srow[0] = srow[1] = fp8_srow(row, bshift, sstride);
	}
	__device__ void store(int tile, const float* red, float rs) const {
		const int i = threadIdx.x, r = 8 * tile + i;
		if (i < 8 && r < N) {
			const float gv = fm_total(red, i) * rs * fp8_row_scale(sg, sdt, r, bshift);
			const float uv = fm_total(red, 8 + i) * rs * fp8_row_scale(su, sdt, r, bshift);
			act[r] = f2bf(gv / (1.f + expf(-gv)) * uv);
		}
	}
};

// fm_persist runs the tiles of tl (FmTileV, FmTile3, FmTileGU; tiles of
// them in all) the persistent way described above. NORM: x is the fp32
// residual and the sums are of RMSNorm(x) with weight nw and eps.
template <int NB, bool NORM, class TILE>
__device__ __forceinline__ void fm_persist(const TILE& tl, int tiles, const void* __restrict__ x, int K, int sdt, int bshift,
		const bf16_t* __restrict__ nw = nullptr, float eps = 0.f) {
	extern __shared__ uint4 fm_xs[];
	__shared__ float red[2][8 * 16];
	__shared__ float ss[8];
	const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, t = lane & 3;
	const int J = K >> 10; // k-steps a warp a tile: K / 128 / 8
	uint4* xw = fm_xs + w * 16 * J;
	const int b = blockIdx.x, G = gridDim.x;
	const int T = b < tiles ? (tiles - 1 - b) / G + 1 : 0; // this block's tiles
	const unsigned char* wr[2];
	const void* sc[2];
	usize srow[2];
	uint4 a[NB][2][2];
	if (T > 0) {
		tl.lane(b, wr, sc, srow);
#pragma unroll
		for (int q = 0; q < NB; q++) fm_load(a[q], wr, K, w + 8 * q, t);
	}
	ft_pdl_wait();
	const int e = NORM ? fm_stage_warp_norm(xw, ss, static_cast<const float*>(x), nw, K, w, J)
	                   : fm_stage_warp(xw, static_cast<const bf16_t*>(x), K, w, J);
	const float ef = e ? __int_as_float((127 + e) << 23) : 1.f;
	FT_TRACE_MARK(0);  // warp 0 has staged its x
	for (int i = 0; i < T; i++) {
		const int tile = b + i * G;
		tl.lane(tile, wr, sc, srow);
		float sum[2] = {0.f, 0.f};
		for (int j0 = 0; j0 < J; j0 += NB) {
#pragma unroll
			for (int q = 0; q < NB; q++) {
				const int j = j0 + q;
				fm_compute(sum, a[q], xw, j, w + 8 * j, t, sc, sdt, srow, bshift, K);
				int ni = i, nj = j + NB; // the k-step this buffer takes next
				if (nj >= J) {
					nj -= J;
					ni++;
				}
				if (ni < T) {
					const unsigned char* lw[2];
					const void* lsc[2];
					usize lsr[2];
					tl.lane(b + ni * G, lw, lsc, lsr);
					fm_load(a[q], lw, K, w + 8 * nj, t);
				}
			}
		}
		float* rb = red[i & 1];
		if (t == 0) {
			const int g = lane >> 2;
			rb[16 * w + g] = sum[0] * ef;
			rb[16 * w + g + 8] = sum[1] * ef;
		}
		__syncthreads();  // red[i & 1] complete; red[(i + 1) & 1]'s readers (tile i − 1) are done
		tl.store(tile, rb, NORM ? fm_rstd(ss, K, eps) : 1.f);
		if (i == 0) FT_TRACE_MARK(1);  // the first tile is stored
	}
	FT_TRACE_MARK(2);  // every tile is stored
}

// FM_PERSIST_KERNELS(NB, MINB) defines the five persistent kernels with NB
// k-steps in flight a warp and registers for MINB blocks an SM, named as
// their block-a-tile twins with mp<NB> for mm<NB>: gemv_fp8_v_mpNB,
// gemv3_fp8_mpNB and gemv_gateup_silu_fp8_mpNB (the arguments of
// gemv_fp8_v_mma_body, gemv3_fp8_mma_body and
// gemv_gateup_silu_fp8_mma_body), and gemv3_fp8_norm_mpNB and
// gemv_gateup_silu_fp8_norm_mpNB (x the fp32 residual, with the RMSNorm's
// weight nw and eps folded in, as the norm_mm twins).
#define FM_PERSIST_KERNELS(NB, MINB)                                                                                                   \
	extern "C" __global__ void __launch_bounds__(256, MINB) gemv_fp8_v_mp##NB(void* y, int out_f32, const bf16_t* __restrict__ x,    \
			const unsigned char* __restrict__ w, const void* __restrict__ scale, int sdt, int N, int K, int bshift, int sstride) {     \
		fm_persist<NB, false>(FmTileV{y, out_f32, w, scale, sdt, N, K, bshift, sstride}, (N + 15) / 16, x, K, sdt, bshift);         \
	}                                                                                                                                  \
	extern "C" __global__ void __launch_bounds__(256, MINB) gemv3_fp8_mp##NB(bf16_t* y0, bf16_t* y1, bf16_t* y2,                     \
			const bf16_t* __restrict__ x, const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1,                 \
			const unsigned char* __restrict__ w2, const void* __restrict__ s0, const void* __restrict__ s1,                           \
			const void* __restrict__ s2, int sdt, int N0, int N1, int N2, int K, int bshift, int sstride) {                           \
		fm_persist<NB, false>(FmTile3{y0, y1, y2, w0, w1, w2, s0, s1, s2, sdt, N0, N1, N2, K, bshift, sstride},                    \
			(N0 + N1 + N2 + 15) / 16, x, K, sdt, bshift);                                                                               \
	}                                                                                                                                  \
	extern "C" __global__ void __launch_bounds__(256, MINB) gemv_gateup_silu_fp8_mp##NB(bf16_t* act, const bf16_t* __restrict__ x,   \
			const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu, const void* __restrict__ sg,                  \
			const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride) {                                            \
		fm_persist<NB, false>(FmTileGU{act, wg, wu, sg, su, sdt, N, K, bshift, sstride}, (N + 7) / 8, x, K, sdt, bshift);          \
	}                                                                                                                                  \
	extern "C" __global__ void __launch_bounds__(256, MINB) gemv3_fp8_norm_mp##NB(bf16_t* y0, bf16_t* y1, bf16_t* y2,                \
			const float* __restrict__ x, const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1,                  \
			const unsigned char* __restrict__ w2, const void* __restrict__ s0, const void* __restrict__ s1,                           \
			const void* __restrict__ s2, int sdt, int N0, int N1, int N2, int K, int bshift, int sstride,                             \
			const bf16_t* __restrict__ nw, float eps) {                                                                                \
		fm_persist<NB, true>(FmTile3{y0, y1, y2, w0, w1, w2, s0, s1, s2, sdt, N0, N1, N2, K, bshift, sstride},                     \
			(N0 + N1 + N2 + 15) / 16, x, K, sdt, bshift, nw, eps);                                                                      \
	}                                                                                                                                  \
	extern "C" __global__ void __launch_bounds__(256, MINB) gemv_gateup_silu_fp8_norm_mp##NB(bf16_t* act, const float* __restrict__ x, \
			const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu, const void* __restrict__ sg,                  \
			const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride, const bf16_t* __restrict__ nw, float eps) {   \
		fm_persist<NB, true>(FmTileGU{act, wg, wu, sg, su, sdt, N, K, bshift, sstride}, (N + 7) / 8, x, K, sdt, bshift, nw, eps);   \
	}

FM_PERSIST_KERNELS(2, 3)
FM_PERSIST_KERNELS(4, 2)

// The variants (fp8variant.go's names): both load their first k-steps
// before ft_pdl_wait; mm2 keeps 2 k-steps in flight and caps the registers
// for 3 blocks an SM, mm4 keeps 4 with registers for 2 blocks. s25h: 3
// k-steps (3 blocks an SM) and 6 (2 blocks) were slower on every shape.

// gemv_fp8_v_mm2: gemv_fp8_v on the tensor cores (gemv_fp8_v_mma_body), 2 k-steps in flight, registers for 3 blocks an SM.
extern "C" __global__ void __launch_bounds__(256, 3) gemv_fp8_v_mm2(void* y, int out_f32, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w, const void* __restrict__ scale, int sdt, int N, int K, int bshift, int sstride) {
	gemv_fp8_v_mma_body<true, 2>(y, out_f32, x, w, scale, sdt, N, K, bshift, sstride);
}

// gemv3_fp8_mm2: gemv3_fp8 on the tensor cores (gemv3_fp8_mma_body), 2 k-steps in flight, registers for 3 blocks an SM.
extern "C" __global__ void __launch_bounds__(256, 3) gemv3_fp8_mm2(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2,
		const void* __restrict__ s0, const void* __restrict__ s1, const void* __restrict__ s2, int sdt,
		int N0, int N1, int N2, int K, int bshift, int sstride) {
	gemv3_fp8_mma_body<true, 2>(y0, y1, y2, x, w0, w1, w2, s0, s1, s2, sdt, N0, N1, N2, K, bshift, sstride);
}

// gemv_gateup_silu_fp8_mm2: gemv_gateup_silu_fp8 on the tensor cores (gemv_gateup_silu_fp8_mma_body), 2 k-steps in flight, registers for 3 blocks an SM.
extern "C" __global__ void __launch_bounds__(256, 3) gemv_gateup_silu_fp8_mm2(bf16_t* act, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu,
		const void* __restrict__ sg, const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride) {
	gemv_gateup_silu_fp8_mma_body<true, 2>(act, x, wg, wu, sg, su, sdt, N, K, bshift, sstride);
}

// gemv_fp8_v_mm4: gemv_fp8_v on the tensor cores (gemv_fp8_v_mma_body), 4 k-steps in flight, registers for 2 blocks an SM.
extern "C" __global__ void __launch_bounds__(256, 2) gemv_fp8_v_mm4(void* y, int out_f32, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w, const void* __restrict__ scale, int sdt, int N, int K, int bshift, int sstride) {
	gemv_fp8_v_mma_body<true, 4>(y, out_f32, x, w, scale, sdt, N, K, bshift, sstride);
}

// gemv3_fp8_mm4: gemv3_fp8 on the tensor cores (gemv3_fp8_mma_body), 4 k-steps in flight, registers for 2 blocks an SM.
extern "C" __global__ void __launch_bounds__(256, 2) gemv3_fp8_mm4(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2,
		const void* __restrict__ s0, const void* __restrict__ s1, const void* __restrict__ s2, int sdt,
		int N0, int N1, int N2, int K, int bshift, int sstride) {
	gemv3_fp8_mma_body<true, 4>(y0, y1, y2, x, w0, w1, w2, s0, s1, s2, sdt, N0, N1, N2, K, bshift, sstride);
}

// gemv_gateup_silu_fp8_mm4: gemv_gateup_silu_fp8 on the tensor cores (gemv_gateup_silu_fp8_mma_body), 4 k-steps in flight, registers for 2 blocks an SM.
extern "C" __global__ void __launch_bounds__(256, 2) gemv_gateup_silu_fp8_mm4(bf16_t* act, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu,
		const void* __restrict__ sg, const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride) {
	gemv_gateup_silu_fp8_mma_body<true, 4>(act, x, wg, wu, sg, su, sdt, N, K, bshift, sstride);
}

// The folded-norm twins (fp8normgemv.go, kernels.FP8NormProjector): the
// q/k/v and gate·up·SiLU GEMVs of RMSNorm(x) for the fp32 residual x with
// the norm's weight nw and eps, so the norm's own launch goes. mm2 and mm4
// as above.

// gemv3_fp8_norm_mm2: gemv3_fp8_mm2 of RMSNorm(x) (x fp32, nw bf16).
extern "C" __global__ void __launch_bounds__(256, 3) gemv3_fp8_norm_mm2(bf16_t* y0, bf16_t* y1, bf16_t* y2, const float* __restrict__ x,
		const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2,
		const void* __restrict__ s0, const void* __restrict__ s1, const void* __restrict__ s2, int sdt,
		int N0, int N1, int N2, int K, int bshift, int sstride, const bf16_t* __restrict__ nw, float eps) {
	gemv3_fp8_mma_body<true, 2, true>(y0, y1, y2, x, w0, w1, w2, s0, s1, s2, sdt, N0, N1, N2, K, bshift, sstride, nw, eps);
}

// gemv_gateup_silu_fp8_norm_mm2: gemv_gateup_silu_fp8_mm2 of RMSNorm(x) (x fp32, nw bf16).
extern "C" __global__ void __launch_bounds__(256, 3) gemv_gateup_silu_fp8_norm_mm2(bf16_t* act, const float* __restrict__ x,
		const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu,
		const void* __restrict__ sg, const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride,
		const bf16_t* __restrict__ nw, float eps) {
	gemv_gateup_silu_fp8_mma_body<true, 2, true>(act, x, wg, wu, sg, su, sdt, N, K, bshift, sstride, nw, eps);
}

// gemv3_fp8_norm_mm4: gemv3_fp8_mm4 of RMSNorm(x) (x fp32, nw bf16).
extern "C" __global__ void __launch_bounds__(256, 2) gemv3_fp8_norm_mm4(bf16_t* y0, bf16_t* y1, bf16_t* y2, const float* __restrict__ x,
		const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2,
		const void* __restrict__ s0, const void* __restrict__ s1, const void* __restrict__ s2, int sdt,
		int N0, int N1, int N2, int K, int bshift, int sstride, const bf16_t* __restrict__ nw, float eps) {
	gemv3_fp8_mma_body<true, 4, true>(y0, y1, y2, x, w0, w1, w2, s0, s1, s2, sdt, N0, N1, N2, K, bshift, sstride, nw, eps);
}

// gemv_gateup_silu_fp8_norm_mm4: gemv_gateup_silu_fp8_mm4 of RMSNorm(x) (x fp32, nw bf16).
extern "C" __global__ void __launch_bounds__(256, 2) gemv_gateup_silu_fp8_norm_mm4(bf16_t* act, const float* __restrict__ x,
		const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu,
		const void* __restrict__ sg, const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride,
		const bf16_t* __restrict__ nw, float eps) {
	gemv_gateup_silu_fp8_mma_body<true, 4, true>(act, x, wg, wu, sg, su, sdt, N, K, bshift, sstride, nw, eps);
}
