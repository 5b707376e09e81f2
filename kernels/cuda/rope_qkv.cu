// The q/k/v GEMV of a one-token decode step with the biases, RoPE and the
// KV-cache store in its epilogue: gemv3_bf16, then add_bias_bf16 on each
// biased projection, then rope_store_bf16, in one launch, with their bits.

// gemv3_rope_store_bf16: for one token x[D] at position p = *posp (posp
// set: a captured graph) or pos0, heads of width d (even), H query and KV
// key/value heads:
//   q = x·wqᵀ [H·d], k = x·wkᵀ, v = x·wvᵀ [KV·d], each sum in fp32 rounded
//   to bf16 as gemv3_bf16 rounds it; where a bias pointer is set, the bias
//   is added as add_bias_bf16 adds it (fp32 add, one rounding);
//   q and k rotated (rotate-half pairs (i, i+d/2) of each head by
//   θ = float(p)·inv[i], rope_rotate) and written to q and k; v written to
//   v; the rotated k and v also land in cache row p of kc and vc [C,KV,d]
//   when 0 ≤ p < capacity (as rope_store_bf16 stores them).
// Persistent warps, as gemv3_bf16: every warp of the grid takes tasks
// warp, warp + W, … (W warps in all). A task is two weight rows streamed
// together, 8 16-byte loads of each in flight per lane (16 in all, as
// gemv3_bf16), x loaded once for both: a rotation pair (i, i+d/2) of one q
// or k head, so that lane 0 rotates the two sums after the warp sums, or
// two adjacent rows of v. Each lane sums its 16-byte chunks of a row in
// the order gemv3_bf16's lane does and warp_sum adds the lanes as there, so
// the rounded projections are gemv3_bf16's. D % 8 == 0, 16-byte aligned
// x and weights. Calls ft_pdl_wait before it touches memory.
extern "C" __global__ void __launch_bounds__(256) gemv3_rope_store_bf16(bf16_t* q, bf16_t* k, bf16_t* v, bf16_t* kc, bf16_t* vc,
		const bf16_t* __restrict__ x, const bf16_t* wq, const bf16_t* wk, const bf16_t* wv, const bf16_t* bq, const bf16_t* bk,
		const bf16_t* bv, int H, int KV, int d, int D, int capacity, const int* posp, int pos0, const float* inv) {
	const int lane = threadIdx.x & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int nv = D >> 3, half = d >> 1;
	const int nq = H * half, nqk = nq + KV * half, n = nqk + KV * half; // q pairs, k pairs, v row pairs
	const int t0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	const uint4* xv = reinterpret_cast<const uint4*>(x);
	uint4 a[8], b[8];
	ft_pdl_wait();
	const int p = ft_pos(posp, pos0);
	const bool store = p >= 0 && p < capacity;
	for (int t = t0; t < n; t += nw) {
		int r0, r1, fi = 0, kind; // kind 0: q, 1: k, 2: v
		const bf16_t* w;
		const bf16_t* bias;
		bf16_t* y;
		if (t < nqk) {
			kind = t < nq ? 0 : 1;
			const int tt = kind == 0 ? t : t - nq;
			const int h = tt / half;
			fi = tt - h * half;
			r0 = h * d + fi, r1 = r0 + half;
			w = kind == 0 ? wq : wk, bias = kind == 0 ? bq : bk, y = kind == 0 ? q : k;
		} else {
			kind = 2;
			r0 = 2 * (t - nqk), r1 = r0 + 1;
			w = wv, bias = bv, y = v;
		}
		const uint4* w0 = reinterpret_cast<const uint4*>(w + (usize)r0 * D);
		const uint4* w1 = reinterpret_cast<const uint4*>(w + (usize)r1 * D);
		float s0 = 0.f, s1 = 0.f;
		int i = lane;
		for (; i + 32 * 7 < nv; i += 32 * 8) {
#pragma unroll
			for (int u = 0; u < 8; u++) {
				a[u] = __ldg(w0 + i + 32 * u);
				b[u] = __ldg(w1 + i + 32 * u);
			}
#pragma unroll
			for (int u = 0; u < 8; u++) {
				const uint4 xx = __ldg(xv + i + 32 * u);
				s0 += dot8(a[u], xx);
				s1 += dot8(b[u], xx);
			}
		}
		for (; i < nv; i += 32) {
			const uint4 xx = __ldg(xv + i);
			s0 += dot8(__ldg(w0 + i), xx);
			s1 += dot8(__ldg(w1 + i), xx);
		}
		s0 = warp_sum(s0);
		s1 = warp_sum(s1);
		if (lane == 0) {
			bf16_t y0 = f2bf(s0), y1 = f2bf(s1);
			if (bias) {
				y0 = f2bf(bf2f(y0) + bf2f(bias[r0]));
				y1 = f2bf(bf2f(y1) + bf2f(bias[r1]));
			}
			if (kind < 2) rope_rotate(bf2f(y0), bf2f(y1), p, inv[fi], y0, y1);
			y[r0] = y0;
			y[r1] = y1;
			if (kind > 0 && store) {
				bf16_t* c = (kind == 1 ? kc : vc) + (usize)p * KV * d;
				c[r0] = y0;
				c[r1] = y1;
			}
		}
	}
}
