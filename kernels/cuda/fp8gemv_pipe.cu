// Software-pipelined twins of fp8gemv.cu's one-token FP8 GEMVs (tuning
// variants u<U>r1sp: FT_FP8_VARIANT). fp8gemv.cu's warps load a batch of U
// 16-byte chunks per row, wait for it, compute it, and only then issue the
// next batch: nothing is in flight while a warp widens E4M3 and does its
// FMAs, reduces or stores, and the x staging (fp8_load_x and its barrier)
// runs before the first weight load. Here:
//   - a warp's first batch is issued right after ft_pdl_wait, before x is
//     staged in shared memory (weights are no earlier kernel's output; no
//     load comes before the wait: gemv.cu's top comment);
//   - batch b+1 (the next batch of the row, or the first of the warp's next
//     row group) is issued before batch b is computed, into the other of
//     two register buffers; the loop is unrolled by two so that the buffers
//     swap by name, not by copies (a copy would wait for the loads).
// The chunks of a lane are summed in the same order (fp8_chunk per chunk,
// rows' scales as in fp8_rows), so the outputs are the bits of the
// unpipelined variant of the same U and R.

// Fp8PipeRows is a group of R weight rows of a pipelined FP8 GEMV: row
// pointers, scale tensors and scale-row indices (fp8_srow).
template <int R>
struct Fp8PipeRows {
	const uint4* wr[R];
	const void* sc[R];
	usize srow[R];
};

// fp8_pipe_issue loads batch c0 (a lane's chunks c0, c0 + 32, …, U of
// them) of the R rows of p into a: unpredicated where the whole batch lies
// in the row (nv chunks), else chunks past the end read as zero.
template <int R, int U>
__device__ __forceinline__ void fp8_pipe_issue(uint4 (&a)[U][R], const Fp8PipeRows<R>& p, int c0, int nv) {
	if (c0 + 32 * (U - 1) < nv) {
#pragma unroll
		for (int u = 0; u < U; u++)
#pragma unroll
			for (int r = 0; r < R; r++) a[u][r] = __ldg(p.wr[r] + c0 + 32 * u);
	} else {
#pragma unroll
		for (int u = 0; u < U; u++) {
			const int c = c0 + 32 * u;
#pragma unroll
			for (int r = 0; r < R; r++) a[u][r] = c < nv ? __ldg(p.wr[r] + c) : make_uint4(0u, 0u, 0u, 0u);
		}
	}
}

// fp8_pipe_compute adds batch c0 (loaded: a) of the rows of p to acc, chunk
// by chunk in order, skipping chunks past the end (fp8_rows' order).
template <int R, int U, int X>
__device__ __forceinline__ void fp8_pipe_compute(float* acc, const uint4 (&a)[U][R], const Fp8PipeRows<R>& p, const float4* xs,
		const uint4* __restrict__ xg, int c0, int nv, int sdt, int bshift) {
	if (c0 + 32 * (U - 1) < nv) {
#pragma unroll
		for (int u = 0; u < U; u++) fp8_chunk<R, X>(acc, a[u], xs, xg, c0 + 32 * u, p.sc, sdt, p.srow, bshift);
	} else {
#pragma unroll
		for (int u = 0; u < U; u++)
			if (c0 + 32 * u < nv) fp8_chunk<R, X>(acc, a[u], xs, xg, c0 + 32 * u, p.sc, sdt, p.srow, bshift);
	}
}

// fp8_pipe_step is one step of the pipelined loop: it issues the batch
// after (g, b) into nxt (the next batch of the row, or batch 0 of group g +
// step, whose rows rows() puts in pn), computes batch b of group g from cur,
// and, after a row group's last batch, hands its sums to finish and moves
// pn into p. nb batches per row; g, b advance; false once g is past G.
template <int R, int U, int X, class Rows, class Finish>
__device__ __forceinline__ bool fp8_pipe_step(uint4 (&cur)[U][R], uint4 (&nxt)[U][R], Fp8PipeRows<R>& p, Fp8PipeRows<R>& pn,
		float* acc, int& g, int& b, int step, int G, int nb, int nv, const float4* xs, const uint4* __restrict__ xg,
		int sdt, int bshift, Rows rows, Finish finish) {
	const int lane = threadIdx.x & 31;
	int gn = g, bn = b + 1;
	if (bn == nb) gn += step, bn = 0;
	if (gn < G) {
		if (bn == 0) {
			rows(gn, pn);
			fp8_pipe_issue<R, U>(nxt, pn, lane, nv);
		} else {
			fp8_pipe_issue<R, U>(nxt, p, lane + 32 * U * bn, nv);
		}
	}
	fp8_pipe_compute<R, U, X>(acc, cur, p, xs, xg, lane + 32 * U * b, nv, sdt, bshift);
	if (bn == 0) {
		finish(g, acc);
#pragma unroll
		for (int r = 0; r < R; r++) acc[r] = 0.f;
		p = pn;
	}
	g = gn, b = bn;
	return g < G;
}

// fp8_pipe_loop runs a warp's row groups g0, g0 + step, … (< G) of a
// pipelined FP8 GEMV: rows(g, p) fills in group g's rows, finish(g, acc)
// takes its R sums (each lane's part; finish reduces and stores). X 0:
// every thread of the block stages x (K values) into xs after issuing its
// first batch (all threads reach the barrier, with or without rows).
template <int R, int U, int X, class Rows, class Finish>
__device__ __forceinline__ void fp8_pipe_loop(int g0, int step, int G, int K, const bf16_t* __restrict__ x, float4* xs,
		int sdt, int bshift, Rows rows, Finish finish) {
	const int lane = threadIdx.x & 31;
	const int nv = K >> 4;
	const int nb = (nv + 32 * U - 1) / (32 * U);
	const uint4* xg = reinterpret_cast<const uint4*>(x);
	uint4 a0[U][R], a1[U][R];
	Fp8PipeRows<R> p, pn;
	float acc[R];
#pragma unroll
	for (int r = 0; r < R; r++) acc[r] = 0.f;
	ft_pdl_wait();
	if (g0 < G) {
		rows(g0, p);
		fp8_pipe_issue<R, U>(a0, p, lane, nv);
	}
	if (X == 0) fp8_load_x(xs, x, K);
	int g = g0, b = 0;
	while (g < G) {
		if (!fp8_pipe_step<R, U, X>(a0, a1, p, pn, acc, g, b, step, G, nb, nv, xs, xg, sdt, bshift, rows, finish)) break;
		if (!fp8_pipe_step<R, U, X>(a1, a0, p, pn, acc, g, b, step, G, nb, nv, xs, xg, sdt, bshift, rows, finish)) break;
	}
}

// gemv_fp8_v_pipe_body is gemv_fp8_v_body pipelined (same arguments, same
// bits).
template <int U, int R, int X>
__device__ __forceinline__ void gemv_fp8_v_pipe_body(void* y, int out_f32, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w, const void* __restrict__ scale, int sdt, int N, int K, int bshift, int sstride) {
	extern __shared__ float4 fp8_xs[];
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int g0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	auto rows = [&](int g, Fp8PipeRows<R>& p) {
#pragma unroll
		for (int r = 0; r < R; r++) {
			const int row = min(g * R + r, N - 1); // a pair past the end reads the last row twice
			p.wr[r] = reinterpret_cast<const uint4*>(w + (usize)row * K);
			p.sc[r] = scale;
			p.srow[r] = fp8_srow(row, bshift, sstride);
		}
	};
	auto finish = [&](int g, const float* acc) {
#pragma unroll
		for (int r = 0; r < R; r++) {
			const int row = g * R + r;
			const float s = warp_sum(acc[r]) * fp8_row_scale(scale, sdt, min(row, N - 1), bshift);
			if (lane == 0 && row < N) fp8_store(y, out_f32, row, s);
		}
	};
	fp8_pipe_loop<R, U, X>(g0, nw, (N + R - 1) / R, K, x, fp8_xs, sdt, bshift, rows, finish);
}

// gemv3_fp8_pipe_body is gemv3_fp8_body pipelined (same bits).
template <int U, int R, int X>
__device__ __forceinline__ void gemv3_fp8_pipe_body(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2,
		const void* __restrict__ s0, const void* __restrict__ s1, const void* __restrict__ s2, int sdt,
		int N0, int N1, int N2, int K, int bshift, int sstride) {
	extern __shared__ float4 fp8_xs[];
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int T = N0 + N1 + N2;
	const int g0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	// which matrix and row a stacked row t is (t < T)
	auto which = [&](int t, int& m, int& row) {
		if (t < N0) m = 0, row = t;
		else if (t < N0 + N1) m = 1, row = t - N0;
		else m = 2, row = t - N0 - N1;
	};
	auto rows = [&](int g, Fp8PipeRows<R>& p) {
#pragma unroll
		for (int r = 0; r < R; r++) {
			int m, row;
			which(min(g * R + r, T - 1), m, row);
			const unsigned char* w = m == 0 ? w0 : m == 1 ? w1 : w2;
			p.wr[r] = reinterpret_cast<const uint4*>(w + (usize)row * K);
			p.sc[r] = m == 0 ? s0 : m == 1 ? s1 : s2;
			p.srow[r] = fp8_srow(row, bshift, sstride);
		}
	};
	auto finish = [&](int g, const float* acc) {
#pragma unroll
		for (int r = 0; r < R; r++) {
			int m, row;
			which(min(g * R + r, T - 1), m, row);
			const float v = warp_sum(acc[r]) * fp8_row_scale(m == 0 ? s0 : m == 1 ? s1 : s2, sdt, row, bshift);
			bf16_t* ys = m == 0 ? y0 : m == 1 ? y1 : y2;
			if (lane == 0 && g * R + r < T) ys[row] = f2bf(v);
		}
	};
	fp8_pipe_loop<R, U, X>(g0, nw, (T + R - 1) / R, K, x, fp8_xs, sdt, bshift, rows, finish);
}

// gemv_gateup_silu_fp8_pipe_body is gemv_gateup_silu_fp8_body pipelined
// (same bits): 2R rows a group (gate and up of R rows), U loads per row a
// batch, U·2R ≤ 32 as there (two buffers: twice that in registers).
template <int U, int R, int X>
__device__ __forceinline__ void gemv_gateup_silu_fp8_pipe_body(bf16_t* act, const bf16_t* __restrict__ x,
		const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu,
		const void* __restrict__ sg, const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride) {
	extern __shared__ float4 fp8_xs[];
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	constexpr int UG = U * 2 * R > 32 ? 16 / R : U; // loads per row in flight
	const int g0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	auto rows = [&](int g, Fp8PipeRows<2 * R>& p) {
#pragma unroll
		for (int r = 0; r < R; r++) {
			const int row = min(g * R + r, N - 1);
			p.wr[2 * r] = reinterpret_cast<const uint4*>(wg + (usize)row * K);
			p.wr[2 * r + 1] = reinterpret_cast<const uint4*>(wu + (usize)row * K);
			p.sc[2 * r] = sg, p.sc[2 * r + 1] = su;
			p.srow[2 * r] = p.srow[2 * r + 1] = fp8_srow(row, bshift, sstride);
		}
	};
	auto finish = [&](int g, const float* acc) {
#pragma unroll
		for (int r = 0; r < R; r++) {
			const int row = g * R + r;
			const int rc = min(row, N - 1);
			const float gv = warp_sum(acc[2 * r]) * fp8_row_scale(sg, sdt, rc, bshift);
			const float uv = warp_sum(acc[2 * r + 1]) * fp8_row_scale(su, sdt, rc, bshift);
			if (lane == 0 && row < N) act[row] = f2bf(gv / (1.f + expf(-gv)) * uv);
		}
	};
	fp8_pipe_loop<2 * R, UG, X>(g0, nw, (N + R - 1) / R, K, x, fp8_xs, sdt, bshift, rows, finish);
}

#define FP8V_PIPE_KERNELS(NAME, U, R, X) \
	extern "C" __global__ void __launch_bounds__(256) gemv_fp8_v_##NAME(void* y, int out_f32, const bf16_t* __restrict__ x, \
			const unsigned char* __restrict__ w, const void* __restrict__ scale, int sdt, int N, int K, int bshift, int sstride) { \
		gemv_fp8_v_pipe_body<U, R, X>(y, out_f32, x, w, scale, sdt, N, K, bshift, sstride); \
	} \
	extern "C" __global__ void __launch_bounds__(256) gemv3_fp8_##NAME(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* __restrict__ x, \
			const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2, \
			const void* __restrict__ s0, const void* __restrict__ s1, const void* __restrict__ s2, int sdt, \
			int N0, int N1, int N2, int K, int bshift, int sstride) { \
		gemv3_fp8_pipe_body<U, R, X>(y0, y1, y2, x, w0, w1, w2, s0, s1, s2, sdt, N0, N1, N2, K, bshift, sstride); \
	} \
	extern "C" __global__ void __launch_bounds__(256) gemv_gateup_silu_fp8_##NAME(bf16_t* act, const bf16_t* __restrict__ x, \
			const unsigned char* __restrict__ wg, const unsigned char* __restrict__ wu, \
			const void* __restrict__ sg, const void* __restrict__ su, int sdt, int N, int K, int bshift, int sstride) { \
		gemv_gateup_silu_fp8_pipe_body<U, R, X>(act, x, wg, wu, sg, su, sdt, N, K, bshift, sstride); \
	}

// FP8V_PIPE_VARIANT instantiates the three pipelined GEMVs of one variant:
// gemv_fp8_v_<name>, gemv3_fp8_<name>, gemv_gateup_silu_fp8_<name>, name
// u<U>r<R>sp (x in shared memory, pipelined); the bits of u<U>r<R>s.
#define FP8V_PIPE_VARIANT(NAME, U, R, X) FP8V_PIPE_KERNELS(NAME, U, R, X)

FP8V_PIPE_VARIANT(u4r1sp, 4, 1, 0)
FP8V_PIPE_VARIANT(u8r1sp, 8, 1, 0)
