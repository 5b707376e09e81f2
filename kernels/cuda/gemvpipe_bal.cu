// Split-K twins of gemvpipe.cu's pipelined one-token BF16 GEMVs
// (FT_GEMV=bal2, bal4; off by default): gemv3_bal<S>_bf16 (q/k/v),
// gemv_gateup_silu_bal<S>_bf16, gemv_persist_bal<S>_f32acc (o, down into the
// residual) and gemv_persist_bal<S>_f32out (the LM head).
//
// The persistent pipelined GEMVs give each warp whole rows: with about
// 4,200 warp slots on an H200, q/k/v's 6,144 rows are 1.45 rows a warp, so
// some warps stream two rows while the rest have finished after one, and
// o/down's 4,096 rows are one row a warp. Here each row is cut into S
// equal segments of K/S columns (K % (8·S) == 0), the work units, so a
// warp's share is rows·S / warps units of 1/S row: the last round of units
// is fuller (q/k/v: 2.91 half-rows a warp at S = 2 instead of 1.45 rows)
// and the pipelined loop (bfp_loop) runs over units exactly as over rows,
// the next unit's first loads issued before the current one is computed.
//
// Unit u is segment u % S of row u / S. Warp gw of nw (nw a multiple of 8)
// takes units gw, gw + nw, …, so its segment s = gw % S is fixed and the S
// warps of one row are S neighbouring warps of one block, at the same step
// i of their loops. Each warp keeps its partial sums (warp_sum of the lane
// sums) in shared memory at [warp group][step][segment]; after the loop the
// block synchronises once and its threads add each row's S partials in
// segment order and store the row. The sum order is fixed (the same bits
// from run to run, in a graph or not) but differs from the pipelined
// kernels' (one lane sum over the whole row): the results agree with them
// to fp32 rounding, not bit for bit.
//
// Dynamic shared memory: 8 · steps · R floats, steps = ceil(N·S / nw) the
// most units a warp takes (R = 2 for gate·up: its gate and up sums).

// bal_body runs a split-K GEMV of N rows and width K over x: rows(row, wr)
// gives row's R weight rows, out(row, v) stores its R fp32 sums.
template <int S, int R, int U, class Rows, class Out>
__device__ __forceinline__ void bal_body(int N, int K, const bf16_t* __restrict__ x, Rows rows, Out out) {
	extern __shared__ float4 bal_part4[];
	float* part = reinterpret_cast<float*>(bal_part4);
	const int lane = threadIdx.x & 31;
	const int w = threadIdx.x >> 5;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int gw = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	const int units = N * S;
	const int steps = (units + nw - 1) / nw;
	const int ks = K / S;
	const int seg = gw % S;
	const int off = (seg * ks) >> 3; // the segment's first chunk in its row
	// The warp's partials of step i go to pp + i·S·R: finish is called for
	// its units in order, so pp steps on by S·R each time.
	float* pp = part + ((w / S) * steps * S + seg) * R;
	auto unitRows = [&](int u, const uint4* (&wr)[R]) {
		rows((int)((unsigned)u / S), wr);
#pragma unroll
		for (int r = 0; r < R; r++) wr[r] += off;
	};
	auto finish = [&](int, float* acc) {
#pragma unroll
		for (int r = 0; r < R; r++) {
			const float v = warp_sum(acc[r]);
			if (lane == 0) pp[r] = v;
		}
		pp += S * R;
	};
	bfp_loop<R, U>(gw, nw, units, ks, x + (usize)seg * ks, unitRows, finish);
	__syncthreads();
	const int groups = blockDim.x / (32 * S);
	for (int e = threadIdx.x; e < groups * steps; e += blockDim.x) {
		const int ge = e / steps, i = e % steps;
		const int row = blockIdx.x * groups + ge + i * (nw / S);
		if (row < N) {
			const float* p = part + (ge * steps + i) * S * R;
			float v[R];
#pragma unroll
			for (int r = 0; r < R; r++) v[r] = p[r];
#pragma unroll
			for (int s = 1; s < S; s++)
#pragma unroll
				for (int r = 0; r < R; r++) v[r] += p[s * R + r];
			out(row, v);
		}
	}
}

// GEMV_BAL_KERNELS instantiates the four split-K GEMVs of S segments a
// row: gemv3_bal<S>_bf16 (gemv3_pipe_bf16's twin), gemv_gateup_silu_bal<S>_bf16,
// gemv_persist_bal<S>_f32acc and gemv_persist_bal<S>_f32out, with
// gemvpipe.cu's pipe depths (4 loads a lane in flight, 2 a matrix for
// gate·up). Same arguments as their twins.
#define GEMV_BAL_KERNELS(S) \
	extern "C" __global__ void __launch_bounds__(256) gemv_persist_bal##S##_f32out(float* y, const bf16_t* x, const bf16_t* w, int N, int K) { \
		bal_body<S, 1, 4>( \
				N, K, x, [&](int row, const uint4* (&wr)[1]) { wr[0] = reinterpret_cast<const uint4*>(w + (usize)row * K); }, \
				[&](int row, const float* v) { y[row] = v[0]; }); \
	} \
	extern "C" __global__ void __launch_bounds__(256) gemv_persist_bal##S##_f32acc(float* y, const bf16_t* x, const bf16_t* w, int N, int K) { \
		bal_body<S, 1, 4>( \
				N, K, x, [&](int row, const uint4* (&wr)[1]) { wr[0] = reinterpret_cast<const uint4*>(w + (usize)row * K); }, \
				[&](int row, const float* v) { y[row] = y[row] + v[0]; }); \
	} \
	extern "C" __global__ void __launch_bounds__(256) gemv3_bal##S##_bf16(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* x, \
			const bf16_t* w0, const bf16_t* w1, const bf16_t* w2, int N0, int N1, int N2, int K) { \
		bal_body<S, 1, 4>( \
				N0 + N1 + N2, K, x, \
				[&](int r, const uint4* (&wr)[1]) { \
					bf16_t* yp; \
					gemv3_row(r, y0, y1, y2, w0, w1, w2, N0, N1, K, wr[0], yp); \
				}, \
				[&](int r, const float* v) { \
					bf16_t* yp = r < N0 ? y0 + r : r < N0 + N1 ? y1 + (r - N0) : y2 + (r - N0 - N1); \
					*yp = f2bf(v[0]); \
				}); \
	} \
	extern "C" __global__ void __launch_bounds__(256, 4) gemv_gateup_silu_bal##S##_bf16(bf16_t* act, const bf16_t* x, \
			const bf16_t* wg, const bf16_t* wu, int N, int K) { \
		bal_body<S, 2, 2>( \
				N, K, x, \
				[&](int row, const uint4* (&wr)[2]) { \
					wr[0] = reinterpret_cast<const uint4*>(wg + (usize)row * K); \
					wr[1] = reinterpret_cast<const uint4*>(wu + (usize)row * K); \
				}, \
				[&](int row, const float* v) { act[row] = f2bf(v[0] / (1.f + expf(-v[0])) * v[1]); }); \
	}

GEMV_BAL_KERNELS(2)
GEMV_BAL_KERNELS(4)
