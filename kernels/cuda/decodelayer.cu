// A plain pre-norm decoder layer's one-token step as one persistent kernel
// (kernels.DecodeLayer; cudabackend's decodelayer.go): one block of
// DL_THREADS threads a multiprocessor, all resident at once, phases
// separated by a self-resetting grid barrier. Each block owns an even
// share of every GEMV's rows; before it waits at a barrier it starts
// cp.async copies of the first rows of its share of the NEXT phase's
// weights into its shared-memory buffer (weights never depend on the
// activations), so that HBM keeps streaming while the grid waits, the
// norm and the attention run.
//
// Phases (head width 128, G = H/KV query heads per KV head, G ≤ 8):
//  0. prefetch q/k/v rows; h = RMSNorm(x)·inNorm into shared memory
//     (bf16, redundantly in every block);
//  1. q, k, v = [WQ;WK;WV]·h (bf16 into the scratch rows); prefetch WO;
//     barrier;
//  2. attention work items (KV head, chunk of positions): q and the new k
//     rotated as rope.cu does, the chunk's (max, sum, acc) per query head
//     to part; the item holding position p stores the rotated k and v in
//     the caches' row p; barrier;
//  3. the chunks merged per query head into att (bf16); barrier;
//  4. x += WO·att; prefetch WGate/WUp; barrier;
//  5. h = RMSNorm(x)·postNorm; gate = silu(WGate·h)·(WUp·h) (bf16);
//     prefetch WDown; barrier;
//  6. x += WDown·gate.
// Data written inside the kernel by other blocks is read with __ldcg (L2,
// never a stale L1 line).

#define DL_THREADS 512
#define DL_WARPS (DL_THREADS / 32)
#define DL_HD 128
#define DL_MAXG 8
#define DL_PU 8 // positions in flight per warp in the attention phase
// The attention phase's shared memory (after the act vector), f32: q
// [G·128], k [128], (m, l) [warps·DL_MAXG·2], the merge tree
// [warps/2·G·128]; the host sizes it alike (decodelayer.go's megaAttnBytes).

// rope_rotate is rope.cu's (defined there, later in the unit).
__device__ __forceinline__ void rope_rotate(float a, float b, int p, float f, bf16_t& r0, bf16_t& r1);

// dl_grid_sync is a grid-wide barrier over nb resident blocks: bar[0]
// counts arrivals, bar[1] is the generation the last arrival bumps (after
// resetting the count), so the words are ready for the next barrier and
// the next launch.
__device__ __forceinline__ void dl_grid_sync(unsigned* bar, unsigned nb) {
	__syncthreads();
	if (threadIdx.x == 0) {
		volatile unsigned* gen = bar + 1;
		const unsigned g = *gen;
		__threadfence();
		if (atomicAdd(bar, 1u) == nb - 1) {
			atomicExch(bar, 0u);
			__threadfence();
			atomicAdd(bar + 1, 1u);
		} else {
			while (*gen == g) __nanosleep(20);
		}
		__threadfence();
	}
	__syncthreads();
}

// dl_mark records, when tr is set (a test's phase trace), the global
// timer at point k of block blk: tr[blk·DL_MARKS + k], in ns.
#define DL_MARKS 16
__device__ __forceinline__ void dl_mark(unsigned long long* tr, int blk, int k) {
	if (tr == 0 || threadIdx.x != 0) return;
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	tr[blk * DL_MARKS + k] = t;
}

// dl_share is block blk's task range [t0, t1) of n tasks over nb blocks.
__device__ __forceinline__ void dl_share(int n, int blk, int nb, int& t0, int& t1) {
	t0 = (int)((long long)n * blk / nb);
	t1 = (int)((long long)n * (blk + 1) / nb);
}

// dl_task_rows gives the one or two weight rows (row width n8 uint4) of
// task t of phase mode: 0 q/k/v (a, b, c concatenated, na and nb rows), 1
// and 3 one matrix a, 2 the pair (a[t], b[t]).
__device__ __forceinline__ void dl_task_rows(int mode, int t, const bf16_t* a, const bf16_t* b, const bf16_t* c,
		int na, int nb, int n8, const uint4*& r0, const uint4*& r1) {
	r1 = 0;
	if (mode == 2) {
		r0 = reinterpret_cast<const uint4*>(a) + (usize)t * n8;
		r1 = reinterpret_cast<const uint4*>(b) + (usize)t * n8;
		return;
	}
	if (mode != 0 || t < na) {
		r0 = reinterpret_cast<const uint4*>(a) + (usize)t * n8;
	} else if (t < na + nb) {
		r0 = reinterpret_cast<const uint4*>(b) + (usize)(t - na) * n8;
	} else {
		r0 = reinterpret_cast<const uint4*>(c) + (usize)(t - na - nb) * n8;
	}
}

// dl_prefetch_count is how many of a block's tasks its buffer of pf bytes
// holds.
__device__ __forceinline__ int dl_prefetch_count(int mode, int t0, int t1, int n8, int pf) {
	const int tb = n8 * 16 * (mode == 2 ? 2 : 1);
	return min(t1 - t0, pf / tb);
}

// dl_prefetch starts the cp.async copies of the block's first prefetched
// tasks of a phase into buf (task k at k·taskBytes, a pair's rows one
// after the other) and commits them as one group.
__device__ __forceinline__ void dl_prefetch(int mode, int t0, int P, const bf16_t* a, const bf16_t* b, const bf16_t* c,
		int na, int nb, int n8, uint4* buf) {
	const int per = mode == 2 ? 2 * n8 : n8;
	const int total = P * per;
	for (int e = threadIdx.x; e < total; e += DL_THREADS) {
		const int k = e / per, j = e - k * per;
		const uint4 *r0, *r1;
		dl_task_rows(mode, t0 + k, a, b, c, na, nb, n8, r0, r1);
		const uint4* src = j < n8 ? r0 + j : r1 + (j - n8);
		cp_async16(buf + e, src);
	}
	cp_async_commit();
}

// dl_ld loads 16 bytes of a weight row: from shared memory (SMEM) or
// through the read-only path.
template <bool SMEM>
__device__ __forceinline__ uint4 dl_ld(const uint4* p) {
	if (SMEM) return *p;
	return __ldg(p);
}

// dl_dot2 is one warp's dot products of rows ra and rb (rb may be null)
// of n8 uint4 with the shared-memory vector xv, eight loads of each row in
// flight per lane; every lane gets the sums.
template <bool SMEM>
__device__ __forceinline__ void dl_dot2(const uint4* ra, const uint4* rb, const uint4* xv, int n8, float& ya, float& yb) {
	const int lane = threadIdx.x & 31;
	float sa = 0.f, sb = 0.f;
	uint4 a[8], b[8];
	int i = lane;
	if (rb) {
		for (; i + 32 * 7 < n8; i += 32 * 8) {
#pragma unroll
			for (int j = 0; j < 8; j++) {
				a[j] = dl_ld<SMEM>(ra + i + 32 * j);
				b[j] = dl_ld<SMEM>(rb + i + 32 * j);
			}
#pragma unroll
			for (int j = 0; j < 8; j++) {
				const uint4 x = xv[i + 32 * j];
				sa += dot8(a[j], x);
				sb += dot8(b[j], x);
			}
		}
		for (; i < n8; i += 32) {
			const uint4 x = xv[i];
			sa += dot8(dl_ld<SMEM>(ra + i), x);
			sb += dot8(dl_ld<SMEM>(rb + i), x);
		}
	} else {
		for (; i + 32 * 7 < n8; i += 32 * 8) {
#pragma unroll
			for (int j = 0; j < 8; j++) a[j] = dl_ld<SMEM>(ra + i + 32 * j);
#pragma unroll
			for (int j = 0; j < 8; j++) sa += dot8(a[j], xv[i + 32 * j]);
		}
		for (; i < n8; i += 32) sa += dot8(dl_ld<SMEM>(ra + i), xv[i]);
	}
	ya = warp_sum(sa);
	yb = warp_sum(sb);
}

// dl_emit stores task t's result (lane 0): mode 0 the q/k/v value (bf16),
// 1 and 3 the residual add, 2 silu(g)·u (bf16).
__device__ __forceinline__ void dl_emit(int mode, int t, float y0, float y1, float* x, bf16_t* q, bf16_t* k, bf16_t* v,
		int na, int nb, bf16_t* gate) {
	if ((threadIdx.x & 31) != 0) return;
	if (mode == 0) {
		if (t < na) q[t] = f2bf(y0);
		else if (t < na + nb) k[t - na] = f2bf(y0);
		else v[t - na - nb] = f2bf(y0);
	} else if (mode == 2) {
		gate[t] = f2bf(y0 / (1.f + expf(-y0)) * y1);
	} else {
		x[t] = __ldcg(x + t) + y0;
	}
}

// dl_unit is one warp's unit of a phase: rows [i0, i1) of the block's
// tasks (i relative to t0; i < P: in buf).
__device__ __forceinline__ bool dl_unit(int u, int P, int n, int step, int& i0, int& i1) {
	// Queue order: shared-memory and global units alternate while both
	// last, so that global loads stay in flight while warps crunch the
	// prefetched rows; then the rest of the longer kind.
	const int ns = (P + step - 1) / step, ng = (n - P + step - 1) / step;
	const int both = min(ns, ng);
	int k;
	bool sm;
	if (u < 2 * both) {
		sm = (u & 1) == 0;
		k = u >> 1;
	} else {
		k = both + u - 2 * both;
		sm = ns > ng;
		if (k >= (sm ? ns : ng)) return false;
	}
	if (sm) {
		i0 = k * step;
		i1 = min(i0 + step, P);
	} else {
		i0 = P + k * step;
		i1 = min(i0 + step, n);
	}
	return true;
}

// dl_gemv runs a block's tasks [t0, t1) of a phase: the first P from buf
// (prefetched; waited for here), the rest from global memory. Warps take
// units (two tasks, or one pair of gate/up rows) from a block-wide queue
// (dl_unit). next is a shared-memory counter.
__device__ void dl_gemv(int mode, int t0, int t1, int P, const uint4* buf, const bf16_t* a, const bf16_t* b, const bf16_t* c,
		int na, int nb, int n8, const uint4* xv, float* x, bf16_t* q, bf16_t* k, bf16_t* v, bf16_t* gate, int* next) {
	const int lane = threadIdx.x & 31;
	if (threadIdx.x == 0) *next = 0;
	cp_async_wait0();
	__syncthreads();
	const int per = mode == 2 ? 2 * n8 : n8;
	const int step = mode == 2 ? 1 : 2;
	const int n = t1 - t0;
	for (;;) {
		int u = 0;
		if (lane == 0) u = atomicAdd(next, 1);
		u = __shfl_sync(FT_FULL, u, 0);
		int i0, i1;
		if (!dl_unit(u, P, n, step, i0, i1)) break;
		const uint4 *ra, *rb = 0;
		float y0, y1;
		if (i0 < P) {
			ra = buf + (usize)i0 * per;
			if (mode == 2) rb = ra + n8;
			else if (i0 + 1 < i1) rb = ra + per;
			dl_dot2<true>(ra, rb, xv, n8, y0, y1);
		} else {
			dl_task_rows(mode, t0 + i0, a, b, c, na, nb, n8, ra, rb);
			if (mode != 2 && i0 + 1 < i1) {
				const uint4* r1;
				dl_task_rows(mode, t0 + i0 + 1, a, b, c, na, nb, n8, rb, r1);
			}
			dl_dot2<false>(ra, rb, xv, n8, y0, y1);
		}
		if (mode == 2) {
			dl_emit(mode, t0 + i0, y0, y1, x, q, k, v, na, nb, gate);
		} else {
			dl_emit(mode, t0 + i0, y0, 0.f, x, q, k, v, na, nb, gate);
			if (rb) dl_emit(mode, t0 + i0 + 1, y1, 0.f, x, q, k, v, na, nb, gate);
		}
	}
	__syncthreads(); // buf is free for the next phase's prefetch
}

// dl_norm writes RMSNorm(x)·nw (bf16) of x [n] f32 into hs; red holds 32
// floats.
__device__ void dl_norm(const float* x, const bf16_t* nw, float eps, int n, bf16_t* hs, float* red) {
	float s = 0.f;
	for (int i = threadIdx.x * 4; i < n; i += DL_THREADS * 4) s = rms_sq4(s, __ldcg(reinterpret_cast<const float4*>(x + i)));
	s = block_sum(s, red);
	const float sc = rms_scale(s, n, eps);
	for (int i = threadIdx.x; i < n; i += DL_THREADS) hs[i] = f2bf(rms_out(__ldcg(x + i), sc, bf2f(nw[i])));
	__syncthreads();
}

// dl_copy_act copies n bf16 values written by other blocks into hs.
__device__ void dl_copy_act(const bf16_t* src, int n, bf16_t* hs) {
	const int n8 = n >> 3;
	for (int i = threadIdx.x; i < n8; i += DL_THREADS)
		reinterpret_cast<uint4*>(hs)[i] = __ldcg(reinterpret_cast<const uint4*>(src) + i);
	__syncthreads();
}

// decode_layer_bf16 is the layer's step (see the top of the file). x [D]
// f32 in place; caches [C,KV,128] bf16; q, k, v, att, gate the scratch
// rows (bf16); part the attention partials (gridDim.x·G·130 floats); bar
// the two barrier words; inv the d/2 rotary frequencies; pf the bytes of
// the prefetch buffer. D % 8 == 0, I % 8 == 0.
extern "C" __global__ void __launch_bounds__(DL_THREADS, 1) decode_layer_bf16(float* x,
		const bf16_t* __restrict__ inNorm, const bf16_t* __restrict__ postNorm, float inEps, float postEps,
		const bf16_t* __restrict__ wq, const bf16_t* __restrict__ wk, const bf16_t* __restrict__ wv, const bf16_t* __restrict__ wo,
		const bf16_t* __restrict__ wg, const bf16_t* __restrict__ wu, const bf16_t* __restrict__ wd,
		bf16_t* kc, bf16_t* vc, bf16_t* qs, bf16_t* ks, bf16_t* vs, bf16_t* att, bf16_t* gate,
		float* part, unsigned* bar, const float* __restrict__ inv,
		int D, int H, int KV, int I, int C, const int* posp, int pos0, int pf, unsigned long long* tr) {
	extern __shared__ uint4 dl_smem[];
	__shared__ float red[32];
	__shared__ int next;
	const int nb = gridDim.x, blk = blockIdx.x;
	const int actN = max(max(D, H * DL_HD), I);
	uint4* buf = dl_smem;
	bf16_t* hs = reinterpret_cast<bf16_t*>(reinterpret_cast<char*>(dl_smem) + pf);
	float* as = reinterpret_cast<float*>(reinterpret_cast<char*>(hs) + ((actN * 2 + 15) & ~15));
	const uint4* xv = reinterpret_cast<const uint4*>(hs);
	const int G = H / KV;
	const int nq = H * DL_HD, nk = KV * DL_HD;
	const int p = ft_pos(posp, pos0);
	const int L = min(p + 1, C); // visible positions
	int t0, t1, P;

	// 0-1: q/k/v.
	const int n8D = D >> 3;
	dl_share(nq + 2 * nk, blk, nb, t0, t1);
	P = dl_prefetch_count(0, t0, t1, n8D, pf);
	dl_mark(tr, blk, 0);
	dl_prefetch(0, t0, P, wq, wk, wv, nq, nk, n8D, buf);
	dl_norm(x, inNorm, inEps, D, hs, red);
	dl_mark(tr, blk, 1);
	dl_gemv(0, t0, t1, P, buf, wq, wk, wv, nq, nk, n8D, xv, x, qs, ks, vs, gate, &next);
	const int n8A = nq >> 3;
	int o0, o1;
	dl_share(D, blk, nb, o0, o1);
	const int Po = dl_prefetch_count(1, o0, o1, n8A, pf);
	dl_mark(tr, blk, 2);
	dl_prefetch(1, o0, Po, wo, 0, 0, D, 0, n8A, buf);
	dl_grid_sync(bar, nb);
	dl_mark(tr, blk, 3);

	// 2: attention items (KV head, chunk).
	{
		const int chunks = max(1, nb / KV);
		const int clen = (L + chunks - 1) / chunks;
		float* qf = as;                        // [G·128]
		float* kf = qf + G * DL_HD;            // [128]
		float* ml = kf + DL_HD;                // [warps·DL_MAXG·2]
		float* tree = ml + DL_WARPS * DL_MAXG * 2; // [warps/2·G·128]
		const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
		for (int item = blk; item < KV * chunks; item += nb) {
			const int g = item / chunks, c = item - g * chunks;
			const int s0 = c * clen, s1 = min(L, s0 + clen);
			float* pr = part + (usize)item * G * (DL_HD + 2);
			if (s0 >= s1) {
				for (int e = threadIdx.x; e < G; e += DL_THREADS) {
					pr[e * (DL_HD + 2)] = -FT_INF;
					pr[e * (DL_HD + 2) + 1] = 0.f;
				}
				continue;
			}
			// Rotated q heads g·G.. and the rotated new k of head g.
			for (int e = threadIdx.x; e < (G + 1) * (DL_HD / 2); e += DL_THREADS) {
				const int hh = e / (DL_HD / 2), i = e - hh * (DL_HD / 2);
				const bf16_t* src = hh < G ? qs + (usize)(g * G + hh) * DL_HD : ks + (usize)g * DL_HD;
				bf16_t r0, r1;
				rope_rotate(bf2f(__ldcg(src + i)), bf2f(__ldcg(src + i + DL_HD / 2)), p, inv[i], r0, r1);
				float* dst = hh < G ? qf + hh * DL_HD : kf;
				dst[i] = bf2f(r0);
				dst[i + DL_HD / 2] = bf2f(r1);
				if (hh == G && p >= s0 && p < s1 && p < C) {
					kc[((usize)p * KV + g) * DL_HD + i] = r0;
					kc[((usize)p * KV + g) * DL_HD + i + DL_HD / 2] = r1;
				}
			}
			if (p >= s0 && p < s1 && p < C)
				for (int e = threadIdx.x; e < DL_HD; e += DL_THREADS)
					vc[((usize)p * KV + g) * DL_HD + e] = __ldcg(vs + (usize)g * DL_HD + e);
			__syncthreads();
			// Each warp walks positions s0 + w, + warps, …; lane holds dims 4·lane..4·lane+3.
			const float scale = 1.4426950408889634f * rsqrtf((float)DL_HD);
			float m[DL_MAXG], l[DL_MAXG], o[DL_MAXG][4];
#pragma unroll
			for (int h = 0; h < DL_MAXG; h++) {
				m[h] = -FT_INF;
				l[h] = 0.f;
				o[h][0] = o[h][1] = o[h][2] = o[h][3] = 0.f;
			}
			// Each warp takes DL_PU consecutive positions at a time, all
			// their key and value loads issued before the math.
			for (int jb = s0 + w * DL_PU; jb < s1; jb += DL_WARPS * DL_PU) {
				uint2 kr[DL_PU], vr[DL_PU];
#pragma unroll
				for (int u = 0; u < DL_PU; u++) {
					const int j = jb + u;
					if (j < s1 && j != p) {
						kr[u] = *reinterpret_cast<const uint2*>(kc + ((usize)j * KV + g) * DL_HD + 4 * lane);
						vr[u] = *reinterpret_cast<const uint2*>(vc + ((usize)j * KV + g) * DL_HD + 4 * lane);
					}
				}
#pragma unroll
				for (int u = 0; u < DL_PU; u++) {
					const int j = jb + u;
					if (j >= s1) break;
					float kk[4], vv[4];
					if (j == p) {
#pragma unroll
						for (int e = 0; e < 4; e++) {
							kk[e] = kf[4 * lane + e];
							vv[e] = bf2f(__ldcg(vs + (usize)g * DL_HD + 4 * lane + e));
						}
					} else {
						kk[0] = __uint_as_float(kr[u].x << 16);
						kk[1] = __uint_as_float(kr[u].x & 0xffff0000u);
						kk[2] = __uint_as_float(kr[u].y << 16);
						kk[3] = __uint_as_float(kr[u].y & 0xffff0000u);
						vv[0] = __uint_as_float(vr[u].x << 16);
						vv[1] = __uint_as_float(vr[u].x & 0xffff0000u);
						vv[2] = __uint_as_float(vr[u].y << 16);
						vv[3] = __uint_as_float(vr[u].y & 0xffff0000u);
					}
#pragma unroll
					for (int h = 0; h < DL_MAXG; h++) {
						if (h >= G) break;
						const float* qh = qf + h * DL_HD + 4 * lane;
						float s = qh[0] * kk[0] + qh[1] * kk[1] + qh[2] * kk[2] + qh[3] * kk[3];
						s = warp_sum(s) * scale;
						const float mn = fmaxf(m[h], s);
						const float a = exp2f(m[h] - mn), e = exp2f(s - mn);
						l[h] = l[h] * a + e;
#pragma unroll
						for (int d = 0; d < 4; d++) o[h][d] = o[h][d] * a + e * vv[d];
						m[h] = mn;
					}
				}
			}
			// Merge the warps in a fixed order (the same bits every run):
			// each rescales its sums to the block's max, then a tree of
			// halvings through shared memory leaves the total in warp 0.
#pragma unroll
			for (int h = 0; h < DL_MAXG; h++)
				if (h < G && lane == 0) {
					ml[(w * DL_MAXG + h) * 2] = m[h];
					ml[(w * DL_MAXG + h) * 2 + 1] = l[h];
				}
			__syncthreads();
			float Mh[DL_MAXG], Sh[DL_MAXG];
#pragma unroll
			for (int h = 0; h < DL_MAXG; h++) {
				Mh[h] = -FT_INF;
				Sh[h] = 0.f;
				if (h >= G) continue;
				for (int ww = 0; ww < DL_WARPS; ww++) Mh[h] = fmaxf(Mh[h], ml[(ww * DL_MAXG + h) * 2]);
				for (int ww = 0; ww < DL_WARPS; ww++) {
					const float mw = ml[(ww * DL_MAXG + h) * 2];
					if (mw != -FT_INF) Sh[h] += ml[(ww * DL_MAXG + h) * 2 + 1] * exp2f(mw - Mh[h]);
				}
				const float a = m[h] == -FT_INF ? 0.f : exp2f(m[h] - Mh[h]);
#pragma unroll
				for (int d = 0; d < 4; d++) o[h][d] *= a;
			}
			for (int half = DL_WARPS / 2; half >= 1; half >>= 1) {
				if (w >= half && w < 2 * half) {
#pragma unroll
					for (int h = 0; h < DL_MAXG; h++)
						if (h < G)
							*reinterpret_cast<float4*>(tree + ((w - half) * G + h) * DL_HD + 4 * lane) = make_float4(o[h][0], o[h][1], o[h][2], o[h][3]);
				}
				__syncthreads();
				if (w < half) {
#pragma unroll
					for (int h = 0; h < DL_MAXG; h++)
						if (h < G) {
							const float4 t = *reinterpret_cast<const float4*>(tree + (w * G + h) * DL_HD + 4 * lane);
							o[h][0] += t.x;
							o[h][1] += t.y;
							o[h][2] += t.z;
							o[h][3] += t.w;
						}
				}
				__syncthreads();
			}
			if (w == 0) {
#pragma unroll
				for (int h = 0; h < DL_MAXG; h++)
					if (h < G) {
						float* ph = pr + h * (DL_HD + 2);
						if (lane == 0) {
							ph[0] = Mh[h];
							ph[1] = Sh[h];
						}
#pragma unroll
						for (int d = 0; d < 4; d++) ph[2 + 4 * lane + d] = o[h][d];
					}
			}
			__syncthreads();
		}
		dl_mark(tr, blk, 4);
		dl_grid_sync(bar, nb);
		dl_mark(tr, blk, 5);

		// 3: merge the chunks per query head into att.
		for (int hq = blk; hq < H; hq += nb) {
			const int g = hq / G, h = hq - g * G;
			float M = -FT_INF;
			for (int c = 0; c < chunks; c++) M = fmaxf(M, __ldcg(part + ((usize)(g * chunks + c) * G + h) * (DL_HD + 2)));
			for (int i = threadIdx.x; i < DL_HD; i += DL_THREADS) {
				float S = 0.f, A = 0.f;
				for (int c = 0; c < chunks; c++) {
					const float* pr = part + ((usize)(g * chunks + c) * G + h) * (DL_HD + 2);
					const float mc = __ldcg(pr);
					if (mc == -FT_INF) continue;
					const float a = exp2f(mc - M);
					S += __ldcg(pr + 1) * a;
					A += __ldcg(pr + 2 + i) * a;
				}
				att[(usize)hq * DL_HD + i] = f2bf(A / S);
			}
		}
		dl_mark(tr, blk, 6);
		dl_grid_sync(bar, nb);
		dl_mark(tr, blk, 7);
	}

	// 4: x += WO·att.
	dl_copy_act(att, nq, hs);
	dl_gemv(1, o0, o1, Po, buf, wo, 0, 0, D, 0, n8A, xv, x, qs, ks, vs, gate, &next);
	dl_mark(tr, blk, 8);
	dl_share(I, blk, nb, t0, t1);
	P = dl_prefetch_count(2, t0, t1, n8D, pf);
	dl_prefetch(2, t0, P, wg, wu, 0, I, I, n8D, buf);
	dl_grid_sync(bar, nb);
	dl_mark(tr, blk, 9);

	// 5: gate = silu(WGate·h)·(WUp·h), h = RMSNorm(x)·postNorm.
	dl_norm(x, postNorm, postEps, D, hs, red);
	dl_mark(tr, blk, 10);
	dl_gemv(2, t0, t1, P, buf, wg, wu, 0, I, I, n8D, xv, x, qs, ks, vs, gate, &next);
	const int n8I = I >> 3;
	dl_share(D, blk, nb, o0, o1);
	P = dl_prefetch_count(3, o0, o1, n8I, pf);
	dl_mark(tr, blk, 11);
	dl_prefetch(3, o0, P, wd, 0, 0, D, 0, n8I, buf);
	dl_grid_sync(bar, nb);
	dl_mark(tr, blk, 12);

	// 6: x += WDown·gate.
	dl_copy_act(gate, I, hs);
	dl_gemv(3, o0, o1, P, buf, wd, 0, 0, D, 0, n8I, xv, x, qs, ks, vs, gate, &next);
	dl_mark(tr, blk, 13);
}
