// Fused mixture-of-experts ops for a few tokens (kernels.MoEFused): the
// routing stays on the device and the experts' weights are found through a
// device table of pointers, tab[e] (gate), tab[E+e] (up), tab[2E+e] (down),
// indexed by the routed expert ids, so a decode step needs no host sync.

// moe_better orders routing candidates: larger probability first, ties to
// the lower expert index; NaN after every number (a row's probabilities are
// either all numbers or all NaN, where the lowest indices win, as
// kernels.Routing picks them).
__device__ __forceinline__ bool moe_better(float v, int i, float bv, int bi) {
	if (bi < 0) return i >= 0;
	if (i < 0) return false;
	const bool n = isnan(v), bn = isnan(bv);
	if (n != bn) return bn;
	if (n || v == bv) return i < bi;
	return v > bv;
}

// moe_ptr reads entry i of a pointer table through the read-only cache.
__device__ __forceinline__ const bf16_t* moe_ptr(const bf16_t* const* tab, int i) {
	return reinterpret_cast<const bf16_t*>(__ldg(reinterpret_cast<const unsigned long long*>(tab) + i));
}

// moe_route_f32 routes token t = blockIdx.x (one warp) from its router
// logits[t, 0..E): p = softmax in F32 exactly as kernels.Routing.Route
// computes it (max, p[e] = exp(l−max) in double rounded to float, the sum in
// index order, p[e] / sum), then K rounds each taking the best expert not yet
// taken (moe_better); ids[t,j] and wts[t,j] = p, divided by their sum (taken
// in j order) when renorm. Shared memory: E floats, then E flags.
extern "C" __global__ void __launch_bounds__(32) moe_route_f32(int* ids, float* wts, const float* logits, int E, int K, int renorm) {
	extern __shared__ float p[];
	unsigned char* taken = reinterpret_cast<unsigned char*>(p + E);
	__shared__ float sum_s;
	const int t = blockIdx.x, lane = threadIdx.x;
	const float* row = logits + (usize)t * E;
	float mx = -FT_INF;
	for (int e = lane; e < E; e += 32) {
		const float v = row[e];
		if (v > mx) mx = v;
	}
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		const float v = __shfl_xor_sync(FT_FULL, mx, o);
		if (v > mx) mx = v;
	}
	for (int e = lane; e < E; e += 32) {
		p[e] = (float)exp((double)(row[e] - mx));
		taken[e] = 0;
	}
	__syncwarp();
	if (lane == 0) {
		float s = 0.f;
		for (int e = 0; e < E; e++) s += p[e];
		sum_s = s;
	}
	__syncwarp();
	const float sum = sum_s;
	for (int e = lane; e < E; e += 32) p[e] = p[e] / sum;
	__syncwarp();
	int* id = ids + (usize)t * K;
	float* w = wts + (usize)t * K;
	for (int j = 0; j < K; j++) {
		float bv = 0.f;
		int bi = -1;
		for (int e = lane; e < E; e += 32) {
			if (!taken[e] && moe_better(p[e], e, bv, bi)) bv = p[e], bi = e;
		}
#pragma unroll
		for (int o = 16; o > 0; o >>= 1) {
			const float ov = __shfl_xor_sync(FT_FULL, bv, o);
			const int oi = __shfl_xor_sync(FT_FULL, bi, o);
			if (moe_better(ov, oi, bv, bi)) bv = ov, bi = oi;
		}
		if (lane == 0) {
			id[j] = bi;
			w[j] = bv;
			taken[bi] = 1;
		}
		__syncwarp();
	}
	if (lane == 0 && renorm) {
		float top = 0.f;
		for (int j = 0; j < K; j++) top += w[j];
		for (int j = 0; j < K; j++) w[j] = w[j] / top;
	}
}

// moe_gateup_bf16 computes, for the S = T·K routed (token, expert) slots,
// act[s, n] = silu(g)·u with g = x[t]·Wg_e[n,:], u = x[t]·Wu_e[n,:] (fp32,
// rounded once), t = s / K, e = ids[s], for n < I; x [T,D], weights [I,D],
// D % 8 == 0, 16-byte aligned. Persistent warps, one (row, slot) each, the
// slots of one row n adjacent so tokens routed to one expert read its rows
// together (from L2 after the first); both rows streamed with 8 16-byte loads
// in flight per lane each.
extern "C" __global__ void __launch_bounds__(256) moe_gateup_bf16(bf16_t* act, const bf16_t* x, const int* ids,
		const bf16_t* const* tab, int E, int S, int K, int I, int D) {
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int nv = D >> 3;
	const int total = S * I;
	for (int r = (blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < total; r += nw) {
		const int n = r / S, s = r - n * S;
		const int e = __ldg(ids + s);
		const uint4* xv = reinterpret_cast<const uint4*>(x + (usize)(s / K) * D);
		const uint4* gr = reinterpret_cast<const uint4*>(moe_ptr(tab, e) + (usize)n * D);
		const uint4* ur = reinterpret_cast<const uint4*>(moe_ptr(tab, E + e) + (usize)n * D);
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
		if (lane == 0) act[(usize)s * I + n] = f2bf(g / (1.f + expf(-g)) * u);
	}
}

// moe_down_f32out computes out[t, d] = Σ_j w[t,j]·(act[t·K+j,:]·Wd_e[d,:]),
// e = ids[t·K+j], for t < T, d < D: the K down projections of a token and
// their weighted sum in one fp32 accumulation, written once. act [T·K, I],
// weights [D,I], I % 8 == 0, 16-byte aligned. Persistent warps, one (d, t)
// each (the tokens of one row d adjacent); a warp's lanes stride over the K
// rows' 16-byte chunks together, 8 loads in flight per lane.
extern "C" __global__ void __launch_bounds__(256) moe_down_f32out(float* out, const bf16_t* act, const int* ids, const float* wts,
		const bf16_t* const* tab, int E, int T, int K, int I, int D) {
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int nv = I >> 3;
	const int C = K * nv;
	const int total = T * D;
	const bf16_t* const* down = tab + 2 * E;
	for (int r = (blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < total; r += nw) {
		const int d = r / T, t = r - d * T;
		const int* id = ids + (usize)t * K;
		const float* w = wts + (usize)t * K;
		const bf16_t* a0 = act + (usize)t * K * I;
		float acc = 0.f;
		int c = lane;
		if (K <= 32) {
			// Lane j holds expert j's row d and weight: the chunks' rows then
			// come by shuffle, not by a chain of dependent loads (id, table,
			// row) per chunk.
			unsigned long long rowj = 0;
			float wj = 0.f;
			if (lane < K) {
				rowj = reinterpret_cast<unsigned long long>(moe_ptr(down, __ldg(id + lane)) + (usize)d * I);
				wj = __ldg(w + lane);
			}
			for (; c + 32 * 7 < C; c += 32 * 8) {
				uint4 a[8], b[8];
				float ww[8];
#pragma unroll
				for (int u = 0; u < 8; u++) {
					const int cc = c + 32 * u, j = cc / nv, i = cc - j * nv;
					const uint4* row = reinterpret_cast<const uint4*>(__shfl_sync(FT_FULL, rowj, j));
					ww[u] = __shfl_sync(FT_FULL, wj, j);
					a[u] = __ldg(row + i);
					b[u] = __ldg(reinterpret_cast<const uint4*>(a0 + (usize)j * I) + i);
				}
#pragma unroll
				for (int u = 0; u < 8; u++) acc += ww[u] * dot8(a[u], b[u]);
			}
			// The tail: every lane takes part in the shuffles, those past C
			// add nothing.
			for (; c - lane < C; c += 32) {
				const int cc = min(c, C - 1), j = cc / nv, i = cc - j * nv;
				const uint4* row = reinterpret_cast<const uint4*>(__shfl_sync(FT_FULL, rowj, j));
				const float wv = __shfl_sync(FT_FULL, wj, j);
				if (c < C) acc += wv * dot8(__ldg(row + i), __ldg(reinterpret_cast<const uint4*>(a0 + (usize)j * I) + i));
			}
		} else {
			for (; c + 32 * 7 < C; c += 32 * 8) {
				uint4 a[8], b[8];
				float ww[8];
#pragma unroll
				for (int u = 0; u < 8; u++) {
					const int cc = c + 32 * u, j = cc / nv, i = cc - j * nv;
					a[u] = __ldg(reinterpret_cast<const uint4*>(moe_ptr(down, __ldg(id + j)) + (usize)d * I) + i);
					b[u] = __ldg(reinterpret_cast<const uint4*>(a0 + (usize)j * I) + i);
					ww[u] = __ldg(w + j);
				}
#pragma unroll
				for (int u = 0; u < 8; u++) acc += ww[u] * dot8(a[u], b[u]);
			}
			for (; c < C; c += 32) {
				const int j = c / nv, i = c - j * nv;
				acc += __ldg(w + j) * dot8(__ldg(reinterpret_cast<const uint4*>(moe_ptr(down, __ldg(id + j)) + (usize)d * I) + i),
				                           __ldg(reinterpret_cast<const uint4*>(a0 + (usize)j * I) + i));
			}
		}
		acc = warp_sum(acc);
		if (lane == 0) out[(usize)t * D + d] = acc;
	}
}
