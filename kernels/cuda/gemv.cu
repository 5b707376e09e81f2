// Matrix-vector products for one token (decode): memory-bound, so each warp
// streams weight rows with 16-byte loads, eight in flight per lane.

// Each GEMV calls ft_pdl_wait before its first load. An L2 prefetch of each
// warp's first weight row before the wait was measured on the H200
// (2026-12-01): the GEMVs ran 6–20% slower (gate·up·SiLU 2.13 against 1.95 ms
// a step, q/k/v 0.68 against 0.56), with or without dependent launch, so the
// kernels only wait.

// gemv_body computes y[n] = Σ_k x[k]·w[n,k] (fp32 accumulation) for one
// input row x[K] and weights w[N,K] (K % 8 == 0, 16-byte aligned rows), U
// 16-byte loads of w in flight per lane. wpr
// warps share a row (each takes every wpr-th 512-byte stretch of it) and sum
// through shared memory; a block of W warps covers W/wpr rows.
template <bool OUT_BF16, int U>
__device__ __forceinline__ void gemv_body(void* y, const bf16_t* __restrict__ x, const bf16_t* __restrict__ w, int N, int K, int wpr) {
	__shared__ float red[32];
	const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
	const int rpb = (blockDim.x >> 5) / wpr;
	const int row = blockIdx.x * rpb + wid / wpr;
	const int part = wid % wpr;
	const int nv = K >> 3;
	ft_pdl_wait();
	float acc = 0.f;
	if (row < N) {
		const uint4* wr = reinterpret_cast<const uint4*>(w + (usize)row * K);
		const uint4* xv = reinterpret_cast<const uint4*>(x);
		const int stride = 32 * wpr;
		int i = part * 32 + lane;
		for (; i + (U - 1) * stride < nv; i += U * stride) {
			uint4 a[U], b[U];
#pragma unroll
			for (int u = 0; u < U; u++) {
				a[u] = __ldg(wr + i + u * stride);
				b[u] = __ldg(xv + i + u * stride);
			}
#pragma unroll
			for (int u = 0; u < U; u++) acc += dot8(a[u], b[u]);
		}
		for (; i < nv; i += stride) acc += dot8(__ldg(wr + i), __ldg(xv + i));
	}
	acc = warp_sum(acc);
	if (lane == 0) red[wid] = acc;
	__syncthreads();
	if (part == 0 && lane == 0 && row < N) {
		float s = 0.f;
		for (int j = 0; j < wpr; j++) s += red[wid + j];
		if (OUT_BF16) ((bf16_t*)y)[row] = f2bf(s);
		else ((float*)y)[row] = s;
	}
}

// gemv_bf16: y[n] = Σ_k x[k]·w[n,k], y in bf16.
extern "C" __global__ void __launch_bounds__(256) gemv_bf16(bf16_t* y, const bf16_t* x, const bf16_t* w, int N, int K, int wpr) {
	gemv_body<true, 8>(y, x, w, N, K, wpr);
}

// gemv_bf16_f32out: y[n] = Σ_k x[k]·w[n,k], y in fp32.
extern "C" __global__ void __launch_bounds__(256) gemv_bf16_f32out(float* y, const bf16_t* x, const bf16_t* w, int N, int K, int wpr) {
	gemv_body<false, 8>(y, x, w, N, K, wpr);
}

// gemv_bf16_u4 is gemv_bf16 with 4 loads in flight per lane (for tuning).
extern "C" __global__ void __launch_bounds__(256) gemv_bf16_u4(bf16_t* y, const bf16_t* x, const bf16_t* w, int N, int K, int wpr) {
	gemv_body<true, 4>(y, x, w, N, K, wpr);
}

// gemv_bf16_u16 is gemv_bf16 with 16 loads in flight per lane (for tuning).
extern "C" __global__ void __launch_bounds__(256) gemv_bf16_u16(bf16_t* y, const bf16_t* x, const bf16_t* w, int N, int K, int wpr) {
	gemv_body<true, 16>(y, x, w, N, K, wpr);
}

// gemv_f32out_u16 is gemv_bf16_f32out with 16 loads in flight per lane.
extern "C" __global__ void __launch_bounds__(256) gemv_f32out_u16(float* y, const bf16_t* x, const bf16_t* w, int N, int K, int wpr) {
	gemv_body<false, 16>(y, x, w, N, K, wpr);
}

// gemv_persist_body is the persistent form of gemv_body with one warp per
// row: every warp of the grid takes rows warp, warp + W, … (W warps in all),
// streaming each row with U 16-byte loads in flight per lane. No block-level
// reduction, no block turnover: the tail is one row. ACC (fp32 y only)
// adds the product to y instead: y[row] = y[row] + Σ, the value an fp32
// product then add_f32 give.
template <bool OUT_BF16, int U, bool ACC = false>
__device__ __forceinline__ void gemv_persist_body(void* y, const bf16_t* __restrict__ x, const bf16_t* __restrict__ w, int N, int K) {
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int nv = K >> 3;
	const uint4* xv = reinterpret_cast<const uint4*>(x);
	const int row0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	ft_pdl_wait();
	for (int row = row0; row < N; row += nw) {
		const uint4* wr = reinterpret_cast<const uint4*>(w + (usize)row * K);
		float acc = 0.f;
		int i = lane;
		for (; i + 32 * (U - 1) < nv; i += 32 * U) {
			uint4 a[U];
#pragma unroll
			for (int u = 0; u < U; u++) a[u] = __ldg(wr + i + 32 * u);
#pragma unroll
			for (int u = 0; u < U; u++) acc += dot8(a[u], __ldg(xv + i + 32 * u));
		}
		for (; i < nv; i += 32) acc += dot8(__ldg(wr + i), __ldg(xv + i));
		acc = warp_sum(acc);
		if (lane == 0) {
			if (OUT_BF16) ((bf16_t*)y)[row] = f2bf(acc);
			else if (ACC) ((float*)y)[row] = ((float*)y)[row] + acc;
			else ((float*)y)[row] = acc;
		}
	}
}

// gemv_persist_bf16: y[n] = Σ_k x[k]·w[n,k] (bf16 y), persistent warps.
extern "C" __global__ void __launch_bounds__(256) gemv_persist_bf16(bf16_t* y, const bf16_t* x, const bf16_t* w, int N, int K) {
	gemv_persist_body<true, 16>(y, x, w, N, K);
}

// gemv_persist_f32out: y[n] = Σ_k x[k]·w[n,k] (fp32 y), persistent warps.
extern "C" __global__ void __launch_bounds__(256) gemv_persist_f32out(float* y, const bf16_t* x, const bf16_t* w, int N, int K) {
	gemv_persist_body<false, 16>(y, x, w, N, K);
}

// gemv_persist_f32acc: y[n] += Σ_k x[k]·w[n,k] (fp32 y, the residual
// stream), persistent warps: o_proj and down_proj of a decode step added
// straight into the residual (kernels.MatMulAdder).
extern "C" __global__ void __launch_bounds__(256) gemv_persist_f32acc(float* y, const bf16_t* x, const bf16_t* w, int N, int K) {
	gemv_persist_body<false, 16, true>(y, x, w, N, K);
}

// gemv3_bf16 runs three GEMVs of one input in one launch (the q, k and v
// projections of a decode step): y_j[n] = Σ_k x[k]·w_j[n,k] for j < 3, rows
// n < N_j, bf16 outputs; persistent warps over the N0+N1+N2 rows.
extern "C" __global__ void __launch_bounds__(256) gemv3_bf16(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* x,
		const bf16_t* w0, const bf16_t* w1, const bf16_t* w2, int N0, int N1, int N2, int K) {
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int nv = K >> 3;
	const uint4* xv = reinterpret_cast<const uint4*>(x);
	const int r0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	ft_pdl_wait();
	for (int r = r0; r < N0 + N1 + N2; r += nw) {
		const bf16_t* w;
		bf16_t* y;
		int row;
		if (r < N0) {
			w = w0, y = y0, row = r;
		} else if (r < N0 + N1) {
			w = w1, y = y1, row = r - N0;
		} else {
			w = w2, y = y2, row = r - N0 - N1;
		}
		const uint4* wr = reinterpret_cast<const uint4*>(w + (usize)row * K);
		float acc = 0.f;
		int i = lane;
		for (; i + 32 * 15 < nv; i += 32 * 16) {
			uint4 a[16];
#pragma unroll
			for (int u = 0; u < 16; u++) a[u] = __ldg(wr + i + 32 * u);
#pragma unroll
			for (int u = 0; u < 16; u++) acc += dot8(a[u], __ldg(xv + i + 32 * u));
		}
		for (; i < nv; i += 32) acc += dot8(__ldg(wr + i), __ldg(xv + i));
		acc = warp_sum(acc);
		if (lane == 0) y[row] = f2bf(acc);
	}
}

// gemv_gateup_silu_bf16 is Llama's MLP up to the down projection for one
// token: act[n] = silu(g)·u with g = Σ_k x[k]·wg[n,k], u = Σ_k x[k]·wu[n,k]
// (fp32, rounded once), silu(g) = g/(1+e^−g); persistent warps, each row of
// both matrices streamed together.
extern "C" __global__ void __launch_bounds__(256) gemv_gateup_silu_bf16(bf16_t* act, const bf16_t* x,
		const bf16_t* wg, const bf16_t* wu, int N, int K) {
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int nv = K >> 3;
	const uint4* xv = reinterpret_cast<const uint4*>(x);
	const int row0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	ft_pdl_wait();
	for (int row = row0; row < N; row += nw) {
		const uint4* gr = reinterpret_cast<const uint4*>(wg + (usize)row * K);
		const uint4* ur = reinterpret_cast<const uint4*>(wu + (usize)row * K);
		float g = 0.f, u = 0.f;
		int i = lane;
		for (; i + 32 * 7 < nv; i += 32 * 8) {
			uint4 a[8], b[8];
#pragma unroll
			for (int j = 0; j < 8; j++) {
				a[j] = __ldg(gr + i + 32 * j);
				b[j] = __ldg(ur + i + 32 * j);
			}
#pragma unroll
			for (int j = 0; j < 8; j++) {
				const uint4 xx = __ldg(xv + i + 32 * j);
				g += dot8(a[j], xx);
				u += dot8(b[j], xx);
			}
		}
		for (; i < nv; i += 32) {
			const uint4 xx = __ldg(xv + i);
			g += dot8(__ldg(gr + i), xx);
			u += dot8(__ldg(ur + i), xx);
		}
		g = warp_sum(g);
		u = warp_sum(u);
		if (lane == 0) act[row] = f2bf(g / (1.f + expf(-g)) * u);
	}
}
