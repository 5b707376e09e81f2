// Software-pipelined one-token FP8 GEMVs (fp8variant.go's p4s, p4g, p2r2s;
// FT_FP8_VARIANT picks them): the same three kernels, arguments and results
// as fp8gemv.cu's variants (gemv_fp8_v_<name>, gemv3_fp8_<name>,
// gemv_gateup_silu_fp8_<name>; out modes 0/1/2 of fp8_store; per-channel
// and power-of-two block scales), built from fp8gemv.cu's chunk math
// (fp8_chunk, fp8_dot16) and gemvpipe.cu's loop shape.
//
// Why (Nsight Compute of gemv_fp8_v_u8r1s, down, bench/RESULTS.md s7b/s8):
// a u*s warp does, one after the other, (1) stage x: a loop of K/1024
// iterations per thread, each one 8-byte L2 load then a shared store, so
// the iterations' loads do not overlap (SASS: one LDG.E.64 per trip, the
// STS waits for it): 14 serial L2 round trips at K 14,336 while 512
// blocks hit the same 28 KB of x; (2) a block barrier; (3) per batch of U
// loads: issue, wait, compute (~55 instructions per 16-byte chunk), with
// nothing in flight while it computes and reduces. At the decode shapes
// each warp gets one or two rows (fp8Grid sizes one wave), so (1)+(2) and
// the exposed load latencies are most of the kernel: 25.9 µs for 58.7 MB
// where 58.7 MB / 4 TB/s is 14.7 µs.
//
// Here:
//   - nothing before the first weight batch: right after ft_pdl_wait a
//     warp issues batch 0 of its first row, then (x in shared memory, p4s)
//     stages x with 4 independent 16-byte loads per thread in flight at a
//     time (one or two rounds at K 4,096 / 14,336), while its weights are
//     on the way; p4g reads x as bf16 from L1 per chunk, no staging;
//   - each warp issues batch b+1 (the next batch of its row, or batch 0 of
//     its next row) before computing batch b, into the other of two
//     register buffers (the loop unrolled by two so that they swap by
//     name), so a warp always has a batch in flight, across rows too;
//   - p2r2s: two rows a warp at a time, so each x read from shared memory
//     serves two weight chunks (2 LDS.128 a 16 weight bytes, not 4).
//
// Budgets (U = 4 chunks of 16 bytes per lane and matrix a batch, gate·up
// U = 2 per matrix): registers 2 buffers × U × R × 4 = 32 for the loads,
// capped at 64 by __launch_bounds__(256, 4) so 4 blocks of 256 threads fit
// an SM (the down's 57 KB of x in p4s also allows exactly 4); gate·up 2
// buffers × 2 × 2 matrices × 4 = 32, capped at 80 (3 blocks). Per 16
// weight bytes: 1 LDG.128; x: 4 LDS.128 (p4s: 64 B of shared reads) or 2
// LDG.128 L1 hits and 16 integer widenings (p4g: 32 B); 8 F2FP
// (cvt.rn.f16x2.e4m3x2), 16 HADD2.F32, 16 FFMA/FMUL, 3 FADD. In flight per
// warp while it computes: U·R·512 bytes (2 KB), 64 KB per SM at 32 warps,
// against ~30 KB per SM that 4 TB/s × ~1 µs of loaded latency needs.
//
// Sums: each lane adds its chunks c = lane, lane + 32, … in order with
// fp8_chunk (the u*r1* expression), so every variant here gives u8r1s's
// bits (x widened in registers is the same fp32 as x staged; U and the
// rows a warp only set how many loads are in flight). TestFP8GEMVRate's
// "match" checks it.

// fp8p_rows are the weight rows of one output row (R of them: 1, or gate
// and up): the 16-byte chunks w, the scale base s and the row's first
// block's scale index srow (fp8_srow).
template <int R>
struct fp8p_rows {
	const uint4* w[R];
	const void* s[R];
	usize srow[R];
};

// fp8_stage_x widens x[K] (bf16, 16-byte aligned, K % 8 == 0) into xs (K
// fp32, fp8_xs_slot's swizzle) as fp8_load_x does, with four independent
// 16-byte loads per thread in flight at a time, then waits at the block
// barrier.
__device__ __forceinline__ void fp8_stage_x(float4* xs, const bf16_t* __restrict__ x, int K) {
	const uint4* x8 = reinterpret_cast<const uint4*>(x);
	const int n = K >> 3;
	for (int f0 = threadIdx.x; f0 < n; f0 += 4 * blockDim.x) {
		uint4 v[4];
#pragma unroll
		for (int j = 0; j < 4; j++) {
			const int f = f0 + j * blockDim.x;
			v[j] = f < n ? __ldg(x8 + f) : make_uint4(0u, 0u, 0u, 0u);
		}
#pragma unroll
		for (int j = 0; j < 4; j++) {
			const int f = f0 + j * blockDim.x;
			if (f < n) {
				xs[fp8_xs_slot(2 * f)] = make_float4(__uint_as_float(v[j].x << 16), __uint_as_float(v[j].x & 0xffff0000u),
						__uint_as_float(v[j].y << 16), __uint_as_float(v[j].y & 0xffff0000u));
				xs[fp8_xs_slot(2 * f + 1)] = make_float4(__uint_as_float(v[j].z << 16), __uint_as_float(v[j].z & 0xffff0000u),
						__uint_as_float(v[j].w << 16), __uint_as_float(v[j].w & 0xffff0000u));
			}
		}
	}
	__syncthreads();
}

// fp8p_issue loads batch c0 (a lane's chunks c0, c0 + 32, …, U of them) of
// the R rows into a: unpredicated where the whole batch lies in the rows
// (nv chunks), else chunks past the end are not loaded (fp8p_compute
// skips them).
template <int R, int U>
__device__ __forceinline__ void fp8p_issue(uint4 (&a)[U][R], const fp8p_rows<R>& wr, int c0, int nv) {
	if (c0 + 32 * (U - 1) < nv) {
#pragma unroll
		for (int u = 0; u < U; u++)
#pragma unroll
			for (int r = 0; r < R; r++) a[u][r] = __ldg(wr.w[r] + c0 + 32 * u);
	} else {
#pragma unroll
		for (int u = 0; u < U; u++)
#pragma unroll
			for (int r = 0; r < R; r++)
				if (c0 + 32 * u < nv) a[u][r] = __ldg(wr.w[r] + c0 + 32 * u);
	}
}

// fp8p_compute adds batch c0 (loaded: a) of the rows wr to acc chunk by
// chunk in order (fp8_chunk).
template <int R, int U, int X>
__device__ __forceinline__ void fp8p_compute(float* acc, const uint4 (&a)[U][R], const fp8p_rows<R>& wr, const float4* xs,
		const uint4* __restrict__ xg, int c0, int nv, int sdt, int bshift) {
	if (c0 + 32 * (U - 1) < nv) {
#pragma unroll
		for (int u = 0; u < U; u++) fp8_chunk<R, X>(acc, a[u], xs, xg, c0 + 32 * u, wr.s, sdt, wr.srow, bshift);
	} else {
#pragma unroll
		for (int u = 0; u < U; u++)
			if (c0 + 32 * u < nv) fp8_chunk<R, X>(acc, a[u], xs, xg, c0 + 32 * u, wr.s, sdt, wr.srow, bshift);
	}
}

// fp8p_ops is the FP8 policy of the shared pipelined loop (common.cuh's
// pipe_step): issue is fp8p_issue, compute fp8p_compute over x staged in
// xs (X 0) or read from xg (X 1); nv chunks a row, sdt and bshift the
// scales' type and block shift.
template <int R, int U, int X>
struct fp8p_ops {
	const float4* xs;
	const uint4* xg;
	int nv, sdt, bshift;
	__device__ __forceinline__ void issue(uint4 (&a)[U][R], const fp8p_rows<R>& wr, int c0) const { fp8p_issue<R, U>(a, wr, c0, nv); }
	__device__ __forceinline__ void compute(float* acc, const uint4 (&a)[U][R], const fp8p_rows<R>& wr, int c0) const {
		fp8p_compute<R, U, X>(acc, a, wr, xs, xg, c0, nv, sdt, bshift);
	}
};

// fp8p_loop runs a warp's output rows row0, row0 + step, … (< N) of a
// pipelined FP8 GEMV over x (K % 16 == 0; K 0 gives sums of 0): rows(row, wr) fills the
// R weight rows of an output row, finish(row, acc, wr) takes the lane's R
// sums (it reduces, scales and stores; it reads the rows' scales from wr).
// Batch 0 of the first row is issued
// right after ft_pdl_wait, before x is staged (X 0: K·4 bytes of dynamic
// shared memory, every thread of the block takes part in the barrier).
// The steps are common.cuh's pipe_step / pipe_run.
template <int R, int U, int X, class Rows, class Finish>
__device__ __forceinline__ void fp8p_loop(int row0, int step, int N, int K, const bf16_t* __restrict__ x, int sdt, int bshift,
		Rows rows, Finish finish) {
	extern __shared__ float4 fp8_xs[];
	const int lane = threadIdx.x & 31;
	const int nv = K >> 4;
	const int nb = max(1, (nv + 32 * U - 1) / (32 * U)); // K 0: one empty batch, the rows' sums are 0
	const fp8p_ops<R, U, X> ops{fp8_xs, reinterpret_cast<const uint4*>(x), nv, sdt, bshift};
	uint4 a0[U][R], a1[U][R];
	fp8p_rows<R> wr, wn;
	float acc[R];
#pragma unroll
	for (int r = 0; r < R; r++) acc[r] = 0.f;
	ft_pdl_wait();
	if (row0 < N) {
		rows(row0, wr);
		fp8p_issue<R, U>(a0, wr, lane, nv);
	}
	if (X == 0) fp8_stage_x(fp8_xs, x, K);
	if (row0 >= N) return;
	pipe_run<R, U>(a0, a1, wr, wn, acc, row0, step, N, nb, ops, rows, finish);
}

// gemv_fp8_v_pipe_body is gemv_fp8_v_body pipelined: y[n] = Σ_k x[k]·q[n,k]·s(n,k),
// stored by fp8_store (out 0 bf16, 1 fp32, 2 added to fp32 y). A warp
// takes RW adjacent rows at a time (RW 2: each x read serves both; a pair
// past the end reads the last row twice and stores it once).
template <int U, int X, int RW>
__device__ __forceinline__ void gemv_fp8_v_pipe_body(void* y, int out, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w, const void* __restrict__ scale, int sdt, int N, int K, int bshift, int sstride) {
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int g0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	auto rows = [&](int g, fp8p_rows<RW>& wr) {
#pragma unroll
		for (int r = 0; r < RW; r++) {
			const int row = min(g * RW + r, N - 1);
			wr.w[r] = reinterpret_cast<const uint4*>(w + (usize)row * K);
			wr.s[r] = scale;
			wr.srow[r] = fp8_srow(row, bshift, sstride);
		}
	};
	auto finish = [&](int g, const float* acc, const fp8p_rows<RW>&) {
#pragma unroll
		for (int r = 0; r < RW; r++) {
			const int row = g * RW + r;
			const float s = warp_sum(acc[r]) * fp8_row_scale(scale, sdt, min(row, N - 1), bshift);
			if (lane == 0 && row < N) fp8_store(y, out, row, s);
		}
	};
	fp8p_loop<RW, U, X>(g0, nw, (N + RW - 1) / RW, K, x, sdt, bshift, rows, finish);
}

// gemv3_fp8_pipe_body is gemv3_fp8_body pipelined: q, k and v of one
// token (bf16 outputs), the N0+N1+N2 rows stacked, RW adjacent ones at a
// time per warp (a pair may straddle two matrices).
template <int U, int X, int RW>
__device__ __forceinline__ void gemv3_fp8_pipe_body(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2,
		const void* __restrict__ s0, const void* __restrict__ s1, const void* __restrict__ s2, int sdt,
		int N0, int N1, int N2, int K, int bshift, int sstride) {
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int g0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	const int T = N0 + N1 + N2;
	auto rows = [&](int g, fp8p_rows<RW>& wr) {
#pragma unroll
		for (int j = 0; j < RW; j++) {
			const int t = min(g * RW + j, T - 1);
			const unsigned char* w;
			int r;
			if (t < N0) {
				w = w0, wr.s[j] = s0, r = t;
			} else if (t < N0 + N1) {
				w = w1, wr.s[j] = s1, r = t - N0;
			} else {
				w = w2, wr.s[j] = s2, r = t - N0 - N1;
			}
			wr.w[j] = reinterpret_cast<const uint4*>(w + (usize)r * K);
			wr.srow[j] = fp8_srow(r, bshift, sstride);
		}
	};
	auto finish = [&](int g, const float* acc, const fp8p_rows<RW>& wr) {
#pragma unroll
		for (int j = 0; j < RW; j++) {
			const int t = min(g * RW + j, T - 1);
			const int r = t < N0 ? t : t < N0 + N1 ? t - N0 : t - N0 - N1;
			const float v = warp_sum(acc[j]) * fp8_row_scale(wr.s[j], sdt, r, bshift);
			if (lane == 0 && g * RW + j < T) (t < N0 ? y0 : t < N0 + N1 ? y1 : y2)[r] = f2bf(v);
		}
	};
	fp8p_loop<RW, U, X>(g0, nw, (T + RW - 1) / RW, K, x, sdt, bshift, rows, finish);
}

// gemv_gateup_silu_fp8_pipe_body is gemv_gateup_silu_fp8_body pipelined:
// act[n] = silu(g)·u, row n of wg and wu streamed together (U chunks of
// each a batch).
template <int U, int X>
__device__ __forceinline__ void gemv_gateup_silu_fp8_pipe_body(bf16_t* act, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu,
		const void* __restrict__ sg, const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride) {
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int row0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	auto rows = [&](int row, fp8p_rows<2>& wr) {
		wr.w[0] = reinterpret_cast<const uint4*>(wg + (usize)row * K);
		wr.w[1] = reinterpret_cast<const uint4*>(wu + (usize)row * K);
		wr.s[0] = sg, wr.s[1] = su;
		wr.srow[0] = wr.srow[1] = fp8_srow(row, bshift, sstride);
	};
	auto finish = [&](int row, const float* acc, const fp8p_rows<2>&) {
		const float gv = warp_sum(acc[0]) * fp8_row_scale(sg, sdt, row, bshift);
		const float uv = warp_sum(acc[1]) * fp8_row_scale(su, sdt, row, bshift);
		if (lane == 0) act[row] = f2bf(gv / (1.f + expf(-gv)) * uv);
	};
	fp8p_loop<2, U, X>(row0, nw, N, K, x, sdt, bshift, rows, finish);
}

// FP8P_VARIANT instantiates the three pipelined GEMVs of one variant under
// fp8gemv.cu's names (gemv_fp8_v_<name>, gemv3_fp8_<name>,
// gemv_gateup_silu_fp8_<name>): U chunks per lane and row a batch, RW rows
// per warp at a time (UG chunks per matrix for gate·up, one row), x from
// shared memory (X 0) or L1 (X 1); MB blocks of 256 threads an SM at least
// (the register cap: 4 → 64, 3 → 80, 2 → 128), MB3 for q/k/v, MBG for
// gate·up.
#define FP8P_VARIANT(NAME, U, RW, UG, X, MB, MB3, MBG) \
	extern "C" __global__ void __launch_bounds__(256, MB) gemv_fp8_v_##NAME(void* y, int out_f32, const bf16_t* __restrict__ x, \
			const unsigned char* __restrict__ w, const void* __restrict__ scale, int sdt, int N, int K, int bshift, int sstride) { \
		gemv_fp8_v_pipe_body<U, X, RW>(y, out_f32, x, w, scale, sdt, N, K, bshift, sstride); \
	} \
	extern "C" __global__ void __launch_bounds__(256, MB3) gemv3_fp8_##NAME(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* __restrict__ x, \
			const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2, \
			const void* __restrict__ s0, const void* __restrict__ s1, const void* __restrict__ s2, int sdt, \
			int N0, int N1, int N2, int K, int bshift, int sstride) { \
		gemv3_fp8_pipe_body<U, X, RW>(y0, y1, y2, x, w0, w1, w2, s0, s1, s2, sdt, N0, N1, N2, K, bshift, sstride); \
	} \
	extern "C" __global__ void __launch_bounds__(256, MBG) gemv_gateup_silu_fp8_##NAME(bf16_t* act, const bf16_t* __restrict__ x, \
			const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu, \
			const void* __restrict__ sg, const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride) { \
		gemv_gateup_silu_fp8_pipe_body<UG, X>(act, x, wg, wu, sg, su, sdt, N, K, bshift, sstride); \
	}

// Registers (NVRTC 12.4, sm_90, cuobjdump -res-usage), no spills: p4s and
// p4g 64 (v, 3) and 80 (gate·up; capped at 64 it spilled 132-160 bytes:
// two rows' pointers, scales and block indices for the current and the
// next row besides the 32 of buffers). p2r2s: two rows per warp sharing
// each x read (half the shared-memory reads a weight byte), 2 chunks a row
// a batch (the same 2 KB in flight a warp), 80 registers (3 blocks); its
// q/k/v at 80 spilled 296 bytes inside the loop (a pair's rows may lie in
// two matrices: twice the pointers), so it may take 128 (2 blocks).
FP8P_VARIANT(p4s, 4, 1, 2, 0, 4, 4, 3)
FP8P_VARIANT(p4g, 4, 1, 2, 1, 4, 4, 3)
FP8P_VARIANT(p2r2s, 2, 2, 2, 0, 3, 2, 3)
