// Software-pipelined twins of gemv.cu's one-token BF16 GEMVs (the default
// for all of them since s16, FT_GEMV=pipe; FT_GEMV=mixed keeps q/k/v on
// gemv.cu's gemv3_bf16, FT_GEMV=persist runs none here):
// gemv3_pipe_bf16 (q/k/v), gemv_gateup_silu_pipe_bf16, gemv_persist_pipe_f32acc
// (o, down into the residual) and gemv_persist_pipe_f32out (the LM head).
//
// gemv.cu's loops load a batch of 16-byte weight chunks and then compute
// it; ptxas moves most of those loads down next to their use (SASS of an
// NVRTC 12.4 sm_90 compile: gemv3_bf16 at 37 registers keeps 2-4 loads in
// flight per warp), and a warp has nothing in flight while it reduces and
// stores a row. Here each warp walks its rows in batches of U chunks per
// lane and issues batch b+1 (the next batch of the row, or the first batch
// of its next row) before computing batch b, into the other of two
// register buffers; the loop is unrolled by two so the buffers swap by
// name (a register copy would wait for the loads), and a batch's loads
// cross the loop's basic-block boundary, which ptxas does not sink them
// past. x is read per chunk from global memory (L1) as in gemv.cu.
//
// Each lane sums its chunks lane, lane + 32, … in the same order with the
// same expression (acc += dot8(w, x)), and the warp reduces with warp_sum,
// so the outputs are the bits of the gemv.cu twins; U only sets how many
// loads are in flight. K must be at least 8 (one chunk): at K = 0 a warp's
// row has no batch and the loop would not end; gemvFn (gemvpipe.go) keeps
// such widths on gemv.cu's kernels.

// bfp_issue loads batch c0 (a lane's chunks c0, c0 + 32, …, U of them) of
// the R rows wr into a: unpredicated where the whole batch lies in the
// rows (nv chunks), else chunks past the end are not loaded.
template <int R, int U>
__device__ __forceinline__ void bfp_issue(uint4 (&a)[U][R], const uint4* const (&wr)[R], int c0, int nv) {
	if (c0 + 32 * (U - 1) < nv) {
#pragma unroll
		for (int u = 0; u < U; u++)
#pragma unroll
			for (int r = 0; r < R; r++) a[u][r] = __ldg(wr[r] + c0 + 32 * u);
	} else {
#pragma unroll
		for (int u = 0; u < U; u++)
#pragma unroll
			for (int r = 0; r < R; r++)
				if (c0 + 32 * u < nv) a[u][r] = __ldg(wr[r] + c0 + 32 * u);
	}
}

// bfp_compute adds batch c0 (loaded: a) to acc chunk by chunk in order:
// acc[r] += dot8(w, x) with x's chunk read from xv.
template <int R, int U>
__device__ __forceinline__ void bfp_compute(float* acc, const uint4 (&a)[U][R], const uint4* __restrict__ xv, int c0, int nv) {
	if (c0 + 32 * (U - 1) < nv) {
#pragma unroll
		for (int u = 0; u < U; u++) {
			const uint4 xx = __ldg(xv + c0 + 32 * u);
#pragma unroll
			for (int r = 0; r < R; r++) acc[r] += dot8(a[u][r], xx);
		}
	} else {
#pragma unroll
		for (int u = 0; u < U; u++)
			if (c0 + 32 * u < nv) {
				const uint4 xx = __ldg(xv + c0 + 32 * u);
#pragma unroll
				for (int r = 0; r < R; r++) acc[r] += dot8(a[u][r], xx);
			}
	}
}

// bfp_ops is the BF16 policy of the shared pipelined loop (common.cuh's
// pipe_step): issue is bfp_issue, compute bfp_compute over x's chunks xv;
// nv chunks a row.
template <int R, int U>
struct bfp_ops {
	const uint4* xv;
	int nv;
	__device__ __forceinline__ void issue(uint4 (&a)[U][R], const uint4* const (&wr)[R], int c0) const { bfp_issue<R, U>(a, wr, c0, nv); }
	__device__ __forceinline__ void compute(float* acc, const uint4 (&a)[U][R], const uint4* const (&)[R], int c0) const {
		bfp_compute<R, U>(acc, a, xv, c0, nv);
	}
};

// bfp_loop runs a warp's rows row0, row0 + step, … (< N) of a pipelined
// GEMV over x (K % 8 == 0): rows(row, wr) gives the R weight rows of
// output row, finish(row, acc) takes the lane's R sums (it reduces and
// stores). Nothing is loaded before ft_pdl_wait, unless EARLY: then the
// warp's first batch of weights (batch 0 of row0) is issued before the
// wait. The weights are never written during a step, so those loads need
// no earlier kernel; x (read in compute) and y (in finish) stay after the
// wait. The steps are common.cuh's pipe_step / pipe_run.
template <int R, int U, class Rows, class Finish, bool EARLY = false>
__device__ __forceinline__ void bfp_loop(int row0, int step, int N, int K, const bf16_t* __restrict__ x, Rows rows, Finish finish) {
	const int lane = threadIdx.x & 31;
	const int nv = K >> 3;
	const int nb = (nv + 32 * U - 1) / (32 * U);
	const bfp_ops<R, U> ops{reinterpret_cast<const uint4*>(x), nv};
	uint4 a0[U][R], a1[U][R];
	const uint4* wr[R];
	const uint4* wn[R];
	float acc[R];
#pragma unroll
	for (int r = 0; r < R; r++) acc[r] = 0.f;
	if (EARLY && row0 < N) {
		rows(row0, wr);
		bfp_issue<R, U>(a0, wr, lane, nv);
	}
	ft_pdl_wait();
	if (row0 >= N) return;
	if (!EARLY) {
		rows(row0, wr);
		bfp_issue<R, U>(a0, wr, lane, nv);
	}
	auto fin = [&](int row, float* sums, const uint4* const (&)[R]) { finish(row, sums); };
	pipe_run<R, U>(a0, a1, wr, wn, acc, row0, step, N, nb, ops, rows, fin);
}

// gemv_persist_pipe_body is gemv_persist_body (no folded norm) pipelined,
// U loads per lane in flight while a batch is computed: y[n] =
// Σ_k x[k]·w[n,k] in bf16 (OUT_BF16) or fp32, or added to fp32 y (ACC);
// persistent warps, one row at a time.
template <int U, bool OUT_BF16, bool ACC, bool EARLY = false>
__device__ __forceinline__ void gemv_persist_pipe_body(void* y, const bf16_t* __restrict__ x, const bf16_t* __restrict__ w, int N, int K) {
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int row0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	auto rows = [&](int row, const uint4* (&wr)[1]) { wr[0] = reinterpret_cast<const uint4*>(w + (usize)row * K); };
	auto finish = [&](int row, float* acc) {
		const float s = warp_sum(acc[0]);
		if (lane == 0) {
			if (OUT_BF16) ((bf16_t*)y)[row] = f2bf(s);
			else if (ACC) ((float*)y)[row] = ((float*)y)[row] + s;
			else ((float*)y)[row] = s;
		}
	};
	bfp_loop<1, U, decltype(rows), decltype(finish), EARLY>(row0, nw, N, K, x, rows, finish);
}

// gemv3_pipe_body is gemv3_body (no folded norm) pipelined, U loads per
// lane in flight while a batch is computed: the q, k and v projections of
// one token, y_j[n] = Σ_k x[k]·w_j[n,k] (bf16), the rows of the three
// matrices stacked.
template <int U, bool EARLY = false>
__device__ __forceinline__ void gemv3_pipe_body(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* x,
		const bf16_t* w0, const bf16_t* w1, const bf16_t* w2, int N0, int N1, int N2, int K) {
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int r0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	auto rows = [&](int r, const uint4* (&wr)[1]) {
		bf16_t* yp;
		gemv3_row(r, y0, y1, y2, w0, w1, w2, N0, N1, K, wr[0], yp);
	};
	auto finish = [&](int r, float* acc) {
		const float s = warp_sum(acc[0]);
		if (lane == 0) {
			bf16_t* yp = r < N0 ? y0 + r : r < N0 + N1 ? y1 + (r - N0) : y2 + (r - N0 - N1);
			*yp = f2bf(s);
		}
	};
	bfp_loop<1, U, decltype(rows), decltype(finish), EARLY>(r0, nw, N0 + N1 + N2, K, x, rows, finish);
}

// gemv_gateup_pipe_body is gemv_gateup_body (no folded norm) pipelined,
// U loads per lane and matrix in flight while a batch is computed: act[n]
// = silu(g)·u, g and u the fp32 sums of row n of wg and wu, both rows
// streamed together.
template <int U, bool EARLY = false>
__device__ __forceinline__ void gemv_gateup_pipe_body(bf16_t* act, const bf16_t* x, const bf16_t* wg, const bf16_t* wu, int N, int K) {
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int row0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	auto rows = [&](int row, const uint4* (&wr)[2]) {
		wr[0] = reinterpret_cast<const uint4*>(wg + (usize)row * K);
		wr[1] = reinterpret_cast<const uint4*>(wu + (usize)row * K);
	};
	auto finish = [&](int row, float* acc) {
		const float g = warp_sum(acc[0]);
		const float u = warp_sum(acc[1]);
		if (lane == 0) act[row] = f2bf(g / (1.f + expf(-g)) * u);
	};
	bfp_loop<2, U, decltype(rows), decltype(finish), EARLY>(row0, nw, N, K, x, rows, finish);
}

// GEMV_PIPE_KERNELS instantiates the four pipelined GEMVs of one depth:
// gemv3_<name>_bf16 (gemv3_bf16's twin), gemv_gateup_silu_<name>_bf16
// (gemv_gateup_silu_bf16's), gemv_persist_<name>_f32acc (gemv_persist_f32acc's:
// o and down into the residual) and gemv_persist_<name>_f32out
// (gemv_persist_f32out's: the LM head); U loads per lane in flight (UG
// per matrix for gate·up) while a batch is computed.
#define GEMV_PIPE_KERNELS(NAME, U, UG, EARLY) \
	extern "C" __global__ void __launch_bounds__(256) gemv_persist_##NAME##_f32out(float* y, const bf16_t* x, const bf16_t* w, int N, int K) { \
		gemv_persist_pipe_body<U, false, false, EARLY>(y, x, w, N, K); \
	} \
	extern "C" __global__ void __launch_bounds__(256) gemv_persist_##NAME##_f32acc(float* y, const bf16_t* x, const bf16_t* w, int N, int K) { \
		gemv_persist_pipe_body<U, false, true, EARLY>(y, x, w, N, K); \
	} \
	extern "C" __global__ void __launch_bounds__(256) gemv3_##NAME##_bf16(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* x, \
			const bf16_t* w0, const bf16_t* w1, const bf16_t* w2, int N0, int N1, int N2, int K) { \
		gemv3_pipe_body<U, EARLY>(y0, y1, y2, x, w0, w1, w2, N0, N1, N2, K); \
	} \
	extern "C" __global__ void __launch_bounds__(256) gemv_gateup_silu_##NAME##_bf16(bf16_t* act, const bf16_t* x, \
			const bf16_t* wg, const bf16_t* wu, int N, int K) { \
		gemv_gateup_pipe_body<UG, EARLY>(act, x, wg, wu, N, K); \
	}

// pipe (FT_GEMV=pipe, and mixed's non-q/k/v GEMVs): at most 64 registers (NVRTC 12.4,
// sm_90), 4 blocks of 256 threads an SM. (A depth of twice the loads in
// flight, about 100 registers and 2 blocks an SM, measured slower on the
// H200 and was removed: bench/RESULTS.md, FT_GEMV=pipe8.)
GEMV_PIPE_KERNELS(pipe, 4, 2, false)

// pipe_early (the default; FT_GEMV_EARLY=0 turns it off; gemvearly.go): the pipe kernels with each
// warp's first batch of weights issued before ft_pdl_wait (bfp_loop's
// EARLY), so that a GEMV launched behind a kernel that leaves most of the
// GPU idle (RMSNorm, the decode attention) starts streaming while that
// kernel runs. Same bits as pipe.
GEMV_PIPE_KERNELS(pipe_early, 4, 2, true)
