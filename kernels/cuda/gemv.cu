// Matrix-vector products for one token (decode): memory-bound, so each warp
// streams weight rows with 16-byte loads, eight in flight per lane.

// Each GEMV calls ft_pdl_wait before it reads x or writes y; only the
// early twins (below) load weights before it. Three ways of starting on the
// weights before the wait were measured on the H200 (2026-12-01, the L2
// prefetch of the weight stream 2026-12-03) and
// removed; do not re-try them without new evidence:
//   - an L2 prefetch of each warp's first weight row: the GEMVs ran 6–20%
//     slower (gate·up·SiLU 2.13 against 1.95 ms a step, q/k/v 0.68 against
//     0.56), with or without dependent launch;
//   - (2026-12-03, s16a) prefetch.global.L2 of the next 6 or 16 KiB of each
//     warp's weight stream beyond the early twins' first batch, in every
//     pipelined GEMV or only o_proj/down_proj: run-model 4.25-4.81 ms a
//     token against 4.03-4.04 (Llama-3-8B), 4.39-5.02 against 4.17-4.18
//     (Qwen3-8B); the more bytes, the slower;
//   - early weight loads (each lane's first batch of 16-byte loads into the
//     registers the loop consumes first, twins of every BF16, FP8 and
//     folded-norm GEMV): the resident decode step at context 512 (CUDA
//     graph) took 4.76 ms against 4.34 ms without.
// New evidence since (2026-12-03, bench/h200-s15a.sh): the GEMVs are now
// persistent (one wave), so a GEMV's blocks can be resident early only
// behind a kernel that leaves SMs free, and dropping the decode attention
// (8-24 blocks) takes 0.18 ms off a run-model token: HBM idles while it
// runs. gemv3_early_bf16 and gemvpipe.cu's pipe_early kernels issue each
// warp's first weight batch before the wait again (gemvearly.go): faster or
// equal in every pair measured, by 0-0.02 ms a step (bench/h200-s15b.sh),
// on by default (FT_GEMV_EARLY=0 turns them off). Their weights must not
// be written by the kernel just ahead on the stream (common.cuh's
// contract): model weights, resident or copied in on the copy stream
// behind an event, are not.

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
	const int stride = 32 * wpr;
	const uint4* wr = reinterpret_cast<const uint4*>(w + (usize)min(row, N - 1) * K);
	uint4 a[U];
	ft_pdl_wait();
	float acc = 0.f;
	if (row < N) {
		const uint4* xv = reinterpret_cast<const uint4*>(x);
		int i = part * 32 + lane;
		for (; i + (U - 1) * stride < nv; i += U * stride) {
			uint4 b[U];
#pragma unroll
			for (int u = 0; u < U; u++) a[u] = __ldg(wr + i + u * stride);
#pragma unroll
			for (int u = 0; u < U; u++) b[u] = __ldg(xv + i + u * stride);
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

// Folded RMSNorm (the NORM template parameter; kernels *_norm): a
// projection of the normalised fp32 residual stream takes the residual
// res[K], the norm weight nw[K] (bf16) and eps instead of x. Every block
// computes the row's inverse RMS itself (no atomics, no second pass: the
// residual is 4·K bytes from L2) and writes x = bf16(res·scale·nw) once into
// its shared memory (K·2 bytes of dynamic shared memory), where the GEMV
// reads it. The sums are those of rmsnorm_f32in_bf16 launched with vt
// threads (the backend passes the same count): virtual thread t sums
// float4s t, t + vt, … (rms_sq4), each virtual warp's 32 sums go through
// warp_sum, and the vt/32 warp sums through warp_sum again, as block_sum
// does; rms_scale and rms_out round as it does. So x holds the bits the
// separate norm would write.

// norm_x_smem computes x into the block's dynamic shared memory as said
// above and returns it (every thread of the block calls it, after
// ft_pdl_wait). K % 4 == 0, vt a multiple of 32 up to 1024.
__device__ __forceinline__ const uint4* norm_x_smem(const float* __restrict__ res, const bf16_t* __restrict__ nw, int K, float eps, int vt) {
	extern __shared__ uint4 gemv_xs[];
	__shared__ float red[32];
	const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nwr = blockDim.x >> 5;
	const int nvw = vt >> 5, n4 = K >> 2;
	const float4* xr = reinterpret_cast<const float4*>(res);
	for (int vw = wid; vw < nvw; vw += nwr) {
		float s = 0.f;
		for (int c = vw * 32 + lane; c < n4; c += vt) s = rms_sq4(s, xr[c]);
		s = warp_sum(s);
		if (lane == 0) red[vw] = s;
	}
	__syncthreads();
	const float scale = rms_scale(warp_sum(lane < nvw ? red[lane] : 0.f), K, eps);
	const unsigned* wv = reinterpret_cast<const unsigned*>(nw);
	unsigned* xs = reinterpret_cast<unsigned*>(gemv_xs);
	for (int c = threadIdx.x; c < n4; c += blockDim.x) {
		const float4 v = xr[c];
		const unsigned w0 = wv[2 * c], w1 = wv[2 * c + 1];
		xs[2 * c] = pack_bf16(rms_out(v.x, scale, __uint_as_float(w0 << 16)), rms_out(v.y, scale, __uint_as_float(w0 & 0xffff0000u)));
		xs[2 * c + 1] = pack_bf16(rms_out(v.z, scale, __uint_as_float(w1 << 16)), rms_out(v.w, scale, __uint_as_float(w1 & 0xffff0000u)));
	}
	__syncthreads();
	return gemv_xs;
}

// ldx is x's 16-byte chunk i: from shared memory (XS, norm_x_smem) or
// global memory.
template <bool XS>
__device__ __forceinline__ uint4 ldx(const uint4* xv, int i) {
	if (XS) return xv[i];
	return __ldg(xv + i);
}

// gemv_persist_body is the persistent form of gemv_body with one warp per
// row: every warp of the grid takes rows warp, warp + W, … (W warps in all),
// streaming each row with U 16-byte loads in flight per lane. No block-level
// reduction, no block turnover: the tail is one row. ACC (fp32 y only)
// adds the product to y instead: y[row] = y[row] + Σ, the value an fp32
// product then add_f32 give. NORM: x is RMSNorm(res)·nrm (norm_x_smem).
template <bool OUT_BF16, int U, bool ACC = false, bool NORM = false>
__device__ __forceinline__ void gemv_persist_body(void* y, const bf16_t* __restrict__ x, const bf16_t* __restrict__ w, int N, int K,
		const float* __restrict__ res = nullptr, const bf16_t* __restrict__ nrm = nullptr, float eps = 0.f, int vt = 0) {
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int nv = K >> 3;
	const int row0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	uint4 a[U];
	ft_pdl_wait();
	const uint4* xv = NORM ? norm_x_smem(res, nrm, K, eps, vt) : reinterpret_cast<const uint4*>(x);
	for (int row = row0; row < N; row += nw) {
		const uint4* wr = reinterpret_cast<const uint4*>(w + (usize)row * K);
		float acc = 0.f;
		int i = lane;
		for (; i + 32 * (U - 1) < nv; i += 32 * U) {
#pragma unroll
			for (int u = 0; u < U; u++) a[u] = __ldg(wr + i + 32 * u);
#pragma unroll
			for (int u = 0; u < U; u++) acc += dot8(a[u], ldx<NORM>(xv, i + 32 * u));
		}
		for (; i < nv; i += 32) acc += dot8(__ldg(wr + i), ldx<NORM>(xv, i));
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

// gemv3_row is row r of the q/k/v stack: its weight row and output slot.
__device__ __forceinline__ void gemv3_row(int r, bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* w0, const bf16_t* w1,
		const bf16_t* w2, int N0, int N1, int K, const uint4*& wr, bf16_t*& yp) {
	if (r < N0) {
		wr = reinterpret_cast<const uint4*>(w0 + (usize)r * K), yp = y0 + r;
	} else if (r < N0 + N1) {
		wr = reinterpret_cast<const uint4*>(w1 + (usize)(r - N0) * K), yp = y1 + (r - N0);
	} else {
		wr = reinterpret_cast<const uint4*>(w2 + (usize)(r - N0 - N1) * K), yp = y2 + (r - N0 - N1);
	}
}

// gemv3_body runs three GEMVs of one input in one launch (the q, k and v
// projections of a decode step): y_j[n] = Σ_k x[k]·w_j[n,k] for j < 3, rows
// n < N_j, bf16 outputs; persistent warps over the N0+N1+N2 rows. NORM:
// x is RMSNorm(res)·nrm (norm_x_smem).
// EARLY (gemv3_early_bf16): the warp's first batch of 16 weight loads
// (row r0's chunks lane, lane + 32, …, when a row has that many) is issued
// before ft_pdl_wait; the weights are written by no kernel still running
// ahead of it (see the top comment), x and the outputs are touched only
// after the wait. Same sums, same bits.
template <bool NORM = false, bool EARLY = false>
__device__ __forceinline__ void gemv3_body(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* __restrict__ x,
		const bf16_t* w0, const bf16_t* w1, const bf16_t* w2, int N0, int N1, int N2, int K,
		const float* __restrict__ res = nullptr, const bf16_t* __restrict__ nrm = nullptr, float eps = 0.f, int vt = 0) {
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int nv = K >> 3;
	const int r0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	uint4 a[16];
	// pre: a holds row r0's first batch (warp-uniform: r0 and nv are).
	bool pre = false;
	if (EARLY && r0 < N0 + N1 + N2 && nv >= 32 * 16) {
		const uint4* wr;
		bf16_t* yp;
		gemv3_row(r0, y0, y1, y2, w0, w1, w2, N0, N1, K, wr, yp);
#pragma unroll
		for (int u = 0; u < 16; u++) a[u] = __ldg(wr + lane + 32 * u);
		pre = true;
	}
	ft_pdl_wait();
	const uint4* xv = NORM ? norm_x_smem(res, nrm, K, eps, vt) : reinterpret_cast<const uint4*>(x);
	for (int r = r0; r < N0 + N1 + N2; r += nw) {
		const uint4* wr;
		bf16_t* yp;
		gemv3_row(r, y0, y1, y2, w0, w1, w2, N0, N1, K, wr, yp);
		float acc = 0.f;
		int i = lane;
		for (; i + 32 * 15 < nv; i += 32 * 16) {
			if (!EARLY || !pre) {
#pragma unroll
				for (int u = 0; u < 16; u++) a[u] = __ldg(wr + i + 32 * u);
			}
			pre = false;
#pragma unroll
			for (int u = 0; u < 16; u++) acc += dot8(a[u], ldx<NORM>(xv, i + 32 * u));
		}
		for (; i < nv; i += 32) acc += dot8(__ldg(wr + i), ldx<NORM>(xv, i));
		acc = warp_sum(acc);
		if (lane == 0) *yp = f2bf(acc);
	}
}

// gemv3_bf16 is gemv3_body: the q, k and v projections of one token.
extern "C" __global__ void __launch_bounds__(256) gemv3_bf16(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* x,
		const bf16_t* w0, const bf16_t* w1, const bf16_t* w2, int N0, int N1, int N2, int K) {
	gemv3_body<false>(y0, y1, y2, x, w0, w1, w2, N0, N1, N2, K);
}

// gemv3_early_bf16 is gemv3_bf16 with its first weight loads before the
// dependent-launch wait (gemv3_body's EARLY; on by default, FT_GEMV_EARLY=0
// turns it off).
extern "C" __global__ void __launch_bounds__(256) gemv3_early_bf16(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* x,
		const bf16_t* w0, const bf16_t* w1, const bf16_t* w2, int N0, int N1, int N2, int K) {
	gemv3_body<false, true>(y0, y1, y2, x, w0, w1, w2, N0, N1, N2, K);
}

// gemv_gateup_body is Llama's MLP up to the down projection for one
// token: act[n] = silu(g)·u with g = Σ_k x[k]·wg[n,k], u = Σ_k x[k]·wu[n,k]
// (fp32, rounded once), silu(g) = g/(1+e^−g); persistent warps, each row of
// both matrices streamed together. NORM: x is RMSNorm(res)·nrm
// (norm_x_smem).
template <bool NORM = false>
__device__ __forceinline__ void gemv_gateup_body(bf16_t* act, const bf16_t* __restrict__ x,
		const bf16_t* __restrict__ wg, const bf16_t* __restrict__ wu, int N, int K,
		const float* __restrict__ res = nullptr, const bf16_t* __restrict__ nrm = nullptr, float eps = 0.f, int vt = 0) {
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int nv = K >> 3;
	const int row0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	uint4 a[8], b[8];
	ft_pdl_wait();
	const uint4* xv = NORM ? norm_x_smem(res, nrm, K, eps, vt) : reinterpret_cast<const uint4*>(x);
	for (int row = row0; row < N; row += nw) {
		const uint4* gr = reinterpret_cast<const uint4*>(wg + (usize)row * K);
		const uint4* ur = reinterpret_cast<const uint4*>(wu + (usize)row * K);
		float g = 0.f, u = 0.f;
		int i = lane;
		for (; i + 32 * 7 < nv; i += 32 * 8) {
#pragma unroll
			for (int j = 0; j < 8; j++) {
				a[j] = __ldg(gr + i + 32 * j);
				b[j] = __ldg(ur + i + 32 * j);
			}
#pragma unroll
			for (int j = 0; j < 8; j++) {
				const uint4 xx = ldx<NORM>(xv, i + 32 * j);
				g += dot8(a[j], xx);
				u += dot8(b[j], xx);
			}
		}
		for (; i < nv; i += 32) {
			const uint4 xx = ldx<NORM>(xv, i);
			g += dot8(__ldg(gr + i), xx);
			u += dot8(__ldg(ur + i), xx);
		}
		g = warp_sum(g);
		u = warp_sum(u);
		if (lane == 0) act[row] = f2bf(g / (1.f + expf(-g)) * u);
	}
}

// gemv_gateup_silu_bf16 is gemv_gateup_body: act = silu(x·wgᵀ)·(x·wuᵀ).
extern "C" __global__ void __launch_bounds__(256) gemv_gateup_silu_bf16(bf16_t* act, const bf16_t* x,
		const bf16_t* wg, const bf16_t* wu, int N, int K) {
	gemv_gateup_body<false>(act, x, wg, wu, N, K);
}

// The folded-RMSNorm GEMVs (see norm_x_smem): q/k/v, gate·up·SiLU and the
// fp32-output persistent GEMV (the LM head) of x = RMSNorm(res)·nrm. K·2
// bytes of dynamic shared memory; vt is the thread count of
// rmsnorm_f32in_bf16 at width K.
// gemv3_norm_bf16 is gemv3_bf16 of x = RMSNorm(res)·nrm.
extern "C" __global__ void __launch_bounds__(256) gemv3_norm_bf16(bf16_t* y0, bf16_t* y1, bf16_t* y2, const float* res,
		const bf16_t* nrm, float eps, int vt, const bf16_t* w0, const bf16_t* w1, const bf16_t* w2, int N0, int N1, int N2, int K) {
	gemv3_body<true>(y0, y1, y2, nullptr, w0, w1, w2, N0, N1, N2, K, res, nrm, eps, vt);
}
// gemv_gateup_silu_norm_bf16 is gemv_gateup_silu_bf16 of x = RMSNorm(res)·nrm.
extern "C" __global__ void __launch_bounds__(256) gemv_gateup_silu_norm_bf16(bf16_t* act, const float* res,
		const bf16_t* nrm, float eps, int vt, const bf16_t* wg, const bf16_t* wu, int N, int K) {
	gemv_gateup_body<true>(act, nullptr, wg, wu, N, K, res, nrm, eps, vt);
}
// gemv_persist_norm_f32out is gemv_persist_f32out of x = RMSNorm(res)·nrm.
extern "C" __global__ void __launch_bounds__(256) gemv_persist_norm_f32out(float* y, const float* res,
		const bf16_t* nrm, float eps, int vt, const bf16_t* w, int N, int K) {
	gemv_persist_body<false, 16, false, true>(y, nullptr, w, N, K, res, nrm, eps, vt);
}
