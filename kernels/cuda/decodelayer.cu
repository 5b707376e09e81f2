// A plain pre-norm decoder layer's one-token step as one persistent kernel
// (kernels.DecodeLayer; cudabackend's decodelayer.go): one block of
// DL_THREADS threads a multiprocessor, all resident at once, phases
// separated by a self-resetting grid barrier. Each block owns an even
// share of every GEMV's rows; before it waits at a barrier one thread
// starts bulk copies (the copy engine, completing on an mbarrier) of the
// first rows of its share of the NEXT phase's weights into its
// shared-memory buffer (weights never depend on the activations), so that
// HBM keeps streaming while the grid waits, the norm and the attention
// run, and no thread stalls on the copies until it needs the rows.
//
// Phases (head width 128, G = H/KV query heads per KV head, G ≤ 8):
//  0. h = RMSNorm(x)·inNorm into shared memory (bf16, redundantly in every
//     block), the q/k/v prefetch issued once x and the norm weight are
//     loaded;
//  1. q, k, v = [WQ;WK;WV]·h (bf16 into the scratch rows); barrier, the
//     first attention rows toward L2 and the WO prefetch issued between
//     the arrival and the wait;
//  2. attention work items (KV head, chunk of positions): q and the new k
//     rotated as rope.cu does, the chunk's (max, sum, acc) per query head
//     to part; the item holding position p stores the rotated k and v in
//     the caches' row p; barrier;
//  3. the chunks merged into att (bf16), the outputs shared out over all
//     blocks; barrier;
//  4. x += WO·att; barrier (the WGate/WUp prefetch issued between
//     arrival and wait);
//  5. h = RMSNorm(x)·postNorm; gate = silu(WGate·h)·(WUp·h) (bf16);
//     barrier (the WDown prefetch likewise);
//  6. x += WDown·gate.
// Data written inside the kernel by other blocks is read with __ldcg (L2,
// never a stale L1 line).

#define DL_THREADS 512
#define DL_WARPS (DL_THREADS / 32)
#define DL_HD 128
#define DL_MAXG 8
#define DL_PU 8 // value rows in flight per warp in the attention phase's P·V
#define DL_TP 512 // positions a tile of the attention phase (scores in shared memory)
#define DL_QP (DL_THREADS / 8) // positions a pass of the scores, 8 lanes each
#define DL_QR 2 // passes of the scores with their key loads in flight at once
// The attention phase's shared memory (after the act vector), f32: q
// [G·128], k [128], (max, sum, rescale) in [warps·DL_MAXG·2], the merge
// tree [warps/2·G·128], the scores [G·DL_TP]; the host sizes it alike
// (decodelayer.go's megaAttnBytes).

// dl_arrive and dl_wait are the two halves of a grid-wide barrier over nb
// resident blocks, so that a block can start work that needs no other
// block's results (its next phase's weight prefetch) between them: bar[0]
// counts arrivals, bar[1] is the generation the last arrival bumps (after
// resetting the count), so the words are ready for the next barrier and
// the next launch. dl_arrive returns (to thread 0) the generation that
// dl_wait waits to see pass.
__device__ __forceinline__ unsigned dl_arrive(unsigned* bar, unsigned nb) {
	__syncthreads();
	unsigned g = 0;
	if (threadIdx.x == 0) {
		volatile unsigned* gen = bar + 1;
		g = *gen;
		__threadfence();
		if (atomicAdd(bar, 1u) == nb - 1) {
			atomicExch(bar, 0u);
			__threadfence();
			atomicAdd(bar + 1, 1u);
		}
	}
	return g;
}

__device__ __forceinline__ void dl_wait(unsigned* bar, unsigned g) {
	if (threadIdx.x == 0) {
		volatile unsigned* gen = bar + 1;
		while (*gen == g) __nanosleep(20);
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

// The prefetch is one thread's handful of bulk copies (the copy engine,
// cp.async.bulk, sm_90) that complete on the block's mbarrier mb: the
// other threads go on at once, and a warp that needs prefetched rows
// waits for the barrier's phase. A block's rows [t0, t0+P) of a row-major
// matrix are contiguous, so a phase takes one copy a tensor touched (q/k/v
// up to three), cut into pieces of at most DL_BULK bytes. Every source row
// starts on 16 bytes (the host declines other pointers; rows are n8·16
// bytes), as the copies need.
#define DL_BULK 32768

// dl_smem_addr is p's shared-memory address.
__device__ __forceinline__ unsigned dl_smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// dl_mb_init makes mb a one-arrival mbarrier (thread 0) and makes that
// visible to the copy engine and every thread.
__device__ __forceinline__ void dl_mb_init(unsigned long long* mb) {
	if (threadIdx.x == 0) {
		asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(dl_smem_addr(mb)) : "memory");
		asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
		asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
	}
	__syncthreads();
}

// dl_mb_wait waits (every calling thread) for the phase of parity ph of
// mb to complete; the copied bytes are then visible to the caller.
__device__ __forceinline__ void dl_mb_wait(unsigned long long* mb, unsigned ph) {
	const unsigned a = dl_smem_addr(mb);
	unsigned done = 0;
	for (;;) {
		asm volatile(
				"{\n\t.reg .pred p;\n\t"
				"mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
				"selp.u32 %0, 1, 0, p;\n\t}"
				: "=r"(done)
				: "r"(a), "r"(ph)
				: "memory");
		if (done) break;
	}
}

// dl_bulk copies bytes (a multiple of 16) from src to dst in pieces,
// completing on mb (whose expected count the caller has raised).
__device__ __forceinline__ void dl_bulk(void* dst, const void* src, unsigned bytes, unsigned long long* mb) {
	const unsigned m = dl_smem_addr(mb);
	for (unsigned o = 0; o < bytes; o += DL_BULK) {
		const unsigned sz = min((unsigned)DL_BULK, bytes - o);
		asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
							 dl_smem_addr(reinterpret_cast<char*>(dst) + o)),
				"l"(reinterpret_cast<const char*>(src) + o), "r"(sz), "r"(m)
				: "memory");
	}
}

// dl_prefetch (thread 0; the caller has synchronised the block since the
// last reads of buf) starts the bulk copies of the block's first P tasks
// of a phase into buf: modes 0, 1 and 3 task k's row at k·n8 uint4, mode
// 2 the P gate rows and then the P up rows. Each call completes one phase
// of mb; the caller flips the parity it waits on after each call with
// P > 0.
__device__ __forceinline__ void dl_prefetch(int mode, int t0, int P, const bf16_t* a, const bf16_t* b, const bf16_t* c,
		int na, int nb, int n8, uint4* buf, unsigned long long* mb) {
	if (threadIdx.x != 0 || P <= 0) return;
	const unsigned row = (unsigned)n8 * 16u;
	const unsigned total = row * (unsigned)P * (mode == 2 ? 2u : 1u);
	// The block's earlier generic reads of buf come before the copies'
	// writes.
	asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(dl_smem_addr(mb)), "r"(total) : "memory");
	char* d = reinterpret_cast<char*>(buf);
	if (mode == 2) {
		dl_bulk(d, a + (usize)t0 * n8 * 8, row * P, mb);
		dl_bulk(d + (usize)row * P, b + (usize)t0 * n8 * 8, row * P, mb);
		return;
	}
	// Tasks [t0, t0+P) over the tensors a [na rows], b [nb], c (mode 0).
	int t = t0;
	const int t1 = t0 + P;
	while (t < t1) {
		const bf16_t* base;
		int lo, hi;
		if (mode != 0 || t < na) {
			base = a, lo = 0, hi = mode != 0 ? t1 : na;
		} else if (t < na + nb) {
			base = b, lo = na, hi = na + nb;
		} else {
			base = c, lo = na + nb, hi = t1;
		}
		const int e = min(t1, hi);
		dl_bulk(d + (usize)(t - t0) * row, base + (usize)(t - lo) * n8 * 8, row * (unsigned)(e - t), mb);
		t = e;
	}
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

// dl_gemv runs a block's tasks [t0, t1) of a phase: the first P from buf
// (dl_prefetch's layout, complete at parity ph of mb), the rest from
// global memory. Units are two tasks, or one pair of gate/up rows, handed
// out by a block-wide queue (next, a shared-memory counter, zero on entry;
// left zero on exit): the global units first, so that their loads stream
// while the bulk copies land, then the prefetched ones (a warp waits on mb
// before its first).
__device__ void dl_gemv(int mode, int t0, int t1, int P, const uint4* buf, unsigned long long* mb, unsigned ph,
		const bf16_t* a, const bf16_t* b, const bf16_t* c, int na, int nb, int n8, const uint4* xv, float* x, bf16_t* q,
		bf16_t* k, bf16_t* v, bf16_t* gate, int* next) {
	const int lane = threadIdx.x & 31;
	const int step = mode == 2 ? 1 : 2;
	const int n = t1 - t0;
	const int ns = (P + step - 1) / step, ng = (n - P + step - 1) / step;
	bool waited = false;
	for (;;) {
		int u = 0;
		if (lane == 0) u = atomicAdd(next, 1);
		u = __shfl_sync(FT_FULL, u, 0);
		if (u >= ng + ns) break;
		const uint4 *ra, *rb = 0;
		float y0, y1;
		int i0;
		if (u >= ng) {
			i0 = (u - ng) * step;
			const int i1 = min(i0 + step, P);
			if (!waited) {
				dl_mb_wait(mb, ph);
				waited = true;
			}
			ra = buf + (usize)i0 * n8;
			if (mode == 2) rb = buf + (usize)(P + i0) * n8;
			else if (i0 + 1 < i1) rb = ra + n8;
			dl_dot2<true>(ra, rb, xv, n8, y0, y1);
		} else {
			i0 = P + u * step;
			const int i1 = min(i0 + step, n);
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
	__syncthreads(); // buf is free for the next phase's prefetch; every warp is past the queue
	if (threadIdx.x == 0) *next = 0;
}

// dl_norm writes RMSNorm(x)·nw (bf16) of x [n] f32 into hs; red holds 32
// floats. x and nw are loaded (for n ≤ DL_NX·4·DL_THREADS, kept in
// registers) and the sum of squares reduced before mid() runs (a weight
// prefetch that would otherwise delay these loads), then hs is written.
// The sum's order is rms_sq4's over float4s, as the separate norm's.
#define DL_NX 4
template <class F>
__device__ void dl_norm(const float* x, const bf16_t* nw, float eps, int n, bf16_t* hs, float* red, F mid) {
	float4 xr[DL_NX];
	uint2 wr[DL_NX];
	float s = 0.f;
#pragma unroll
	for (int k = 0; k < DL_NX; k++) {
		const int i = threadIdx.x * 4 + k * DL_THREADS * 4;
		if (i < n) {
			xr[k] = __ldcg(reinterpret_cast<const float4*>(x + i));
			wr[k] = *reinterpret_cast<const uint2*>(nw + i);
		}
	}
#pragma unroll
	for (int k = 0; k < DL_NX; k++)
		if (threadIdx.x * 4 + k * DL_THREADS * 4 < n) s = rms_sq4(s, xr[k]);
	for (int i = threadIdx.x * 4 + DL_NX * DL_THREADS * 4; i < n; i += DL_THREADS * 4)
		s = rms_sq4(s, __ldcg(reinterpret_cast<const float4*>(x + i)));
	s = block_sum(s, red);
	mid();
	const float sc = rms_scale(s, n, eps);
#pragma unroll
	for (int k = 0; k < DL_NX; k++) {
		const int i = threadIdx.x * 4 + k * DL_THREADS * 4;
		if (i < n) {
			hs[i] = f2bf(rms_out(xr[k].x, sc, __uint_as_float(wr[k].x << 16)));
			hs[i + 1] = f2bf(rms_out(xr[k].y, sc, __uint_as_float(wr[k].x & 0xffff0000u)));
			hs[i + 2] = f2bf(rms_out(xr[k].z, sc, __uint_as_float(wr[k].y << 16)));
			hs[i + 3] = f2bf(rms_out(xr[k].w, sc, __uint_as_float(wr[k].y & 0xffff0000u)));
		}
	}
	for (int i = threadIdx.x * 4 + DL_NX * DL_THREADS * 4; i < n; i += DL_THREADS * 4)
		for (int d = 0; d < 4; d++) hs[i + d] = f2bf(rms_out(__ldcg(x + i + d), sc, bf2f(nw[i + d])));
	__syncthreads();
}

// dl_copy_act copies n bf16 values written by other blocks into hs; the
// first loads (4 uint4 a thread) are issued before mid() runs (a weight
// prefetch that would otherwise delay them).
template <class F>
__device__ void dl_copy_act(const bf16_t* src, int n, bf16_t* hs, F mid) {
	const int n8 = n >> 3;
	const uint4* s4 = reinterpret_cast<const uint4*>(src);
	uint4* h4 = reinterpret_cast<uint4*>(hs);
	uint4 r[4];
#pragma unroll
	for (int k = 0; k < 4; k++) {
		const int i = threadIdx.x + k * DL_THREADS;
		if (i < n8) r[k] = __ldcg(s4 + i);
	}
	mid();
#pragma unroll
	for (int k = 0; k < 4; k++) {
		const int i = threadIdx.x + k * DL_THREADS;
		if (i < n8) h4[i] = r[k];
	}
	for (int i = threadIdx.x + 4 * DL_THREADS; i < n8; i += DL_THREADS) h4[i] = __ldcg(s4 + i);
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
	__shared__ unsigned long long mb; // the prefetch's mbarrier
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
	dl_mb_init(&mb);
	unsigned ph = 0; // the parity of mb's phase the next prefetch completes
	if (threadIdx.x == 0) next = 0; // dl_norm's block_sum syncs before dl_gemv uses it
	const int n8D = D >> 3;
	dl_share(nq + 2 * nk, blk, nb, t0, t1);
	P = dl_prefetch_count(0, t0, t1, n8D, pf);
	dl_mark(tr, blk, 0);
	dl_norm(x, inNorm, inEps, D, hs, red, [&] { dl_prefetch(0, t0, P, wq, wk, wv, nq, nk, n8D, buf, &mb); });
	dl_mark(tr, blk, 1);
	dl_gemv(0, t0, t1, P, buf, &mb, ph, wq, wk, wv, nq, nk, n8D, xv, x, qs, ks, vs, gate, &next);
	if (P > 0) ph ^= 1u;
	const int n8A = nq >> 3;
	int o0, o1;
	dl_share(D, blk, nb, o0, o1);
	const int Po = dl_prefetch_count(1, o0, o1, n8A, pf);
	dl_mark(tr, blk, 2);
	unsigned gen = dl_arrive(bar, nb);
	{
		// The first attention item's first key and value rows (written by
		// earlier steps; row p is rewritten in L2 later) toward L2 before the
		// WO prefetch, so that they do not queue behind it.
		const int chunks = max(1, nb / KV), item = blk;
		if (item < KV * chunks) {
			const int g = item / chunks, c = item - g * chunks;
			const int clen = (L + chunks - 1) / chunks, s0 = c * clen;
			const int nk2 = max(0, min(L, s0 + DL_QR * DL_QP) - s0), nv2 = max(0, min(L, s0 + DL_WARPS * DL_PU) - s0);
			for (int e = threadIdx.x; e < 2 * (nk2 + nv2); e += DL_THREADS) {
				const int half = e & 1, r = e >> 1;
				const bf16_t* row = r < nk2 ? kc + ((usize)(s0 + r) * KV + g) * DL_HD : vc + ((usize)(s0 + r - nk2) * KV + g) * DL_HD;
				asm volatile("prefetch.global.L2 [%0];" ::"l"(row + 64 * half));
			}
		}
	}
	dl_prefetch(1, o0, Po, wo, 0, 0, D, 0, n8A, buf, &mb);
	dl_wait(bar, gen);
	dl_mark(tr, blk, 3);

	// 2: attention items (KV head, chunk), in tiles of DL_TP positions: the
	// scores (one dot product per (position, head), 8 lanes a position)
	// to shared memory, one max and sum per head and tile (warp h for head
	// h), then P·V with each warp over its own positions and its lanes over
	// the dims, the warps' sums added in a fixed tree at the end (the same
	// bits every run).
	{
		const int chunks = max(1, nb / KV);
		const int clen = (L + chunks - 1) / chunks;
		float* qf = as;                                  // [G·128]
		float* kf = qf + G * DL_HD;                      // [128]
		float* ml = kf + DL_HD;                          // running max, sum, rescale [3·DL_MAXG] (of DL_WARPS·DL_MAXG·2)
		float* tree = ml + DL_WARPS * DL_MAXG * 2;       // [warps/2·G·128]
		float* scs = tree + (DL_WARPS / 2) * G * DL_HD;  // [G·DL_TP]
		float* Mr = ml;
		float* Sr = ml + DL_MAXG;
		float* Al = ml + 2 * DL_MAXG;
		const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
		const int ps = threadIdx.x >> 3, sub = threadIdx.x & 7;
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
			const bf16_t* kg = kc + (usize)g * DL_HD;
			const bf16_t* vg = vc + (usize)g * DL_HD;
			const usize rs = (usize)KV * DL_HD; // a cache row's stride
			// The first tile's value rows of this warp, issued first.
			uint2 vr[DL_PU];
#pragma unroll
			for (int u = 0; u < DL_PU; u++) {
				const int j = s0 + w + DL_WARPS * u;
				if (j < s1 && j != p) vr[u] = *reinterpret_cast<const uint2*>(vg + (usize)j * rs + 4 * lane);
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
			if (threadIdx.x < G) {
				Mr[threadIdx.x] = -FT_INF;
				Sr[threadIdx.x] = 0.f;
			}
			__syncthreads();
			const float scale = 1.4426950408889634f * rsqrtf((float)DL_HD);
			float o[DL_MAXG][4];
#pragma unroll
			for (int h = 0; h < DL_MAXG; h++) o[h][0] = o[h][1] = o[h][2] = o[h][3] = 0.f;
			for (int tb = s0; tb < s1; tb += DL_TP) {
				const int te = min(s1, tb + DL_TP);
				if (tb != s0) {
#pragma unroll
					for (int u = 0; u < DL_PU; u++) {
						const int j = tb + w + DL_WARPS * u;
						if (j < te && j != p) vr[u] = *reinterpret_cast<const uint2*>(vg + (usize)j * rs + 4 * lane);
					}
				}
				// Scores: position tb + ps + DL_QP·r, dims 16·sub..16·sub+15.
				for (int jb = tb; jb < te; jb += DL_QR * DL_QP) {
					uint4 kr[DL_QR][2];
#pragma unroll
					for (int r = 0; r < DL_QR; r++) {
						const int j = jb + ps + DL_QP * r;
						if (j < te && j != p) {
							const uint4* kp = reinterpret_cast<const uint4*>(kg + (usize)j * rs + 16 * sub);
							kr[r][0] = kp[0];
							kr[r][1] = kp[1];
						}
					}
#pragma unroll
					for (int r = 0; r < DL_QR; r++) {
						const int j = jb + ps + DL_QP * r;
						if (jb + DL_QP * r >= te) break; // no position of this r in the block
						float kk[16];
						if (j >= te) {
#pragma unroll
							for (int d = 0; d < 16; d++) kk[d] = 0.f;
						} else if (j == p) {
#pragma unroll
							for (int d = 0; d < 16; d++) kk[d] = kf[16 * sub + d];
						} else {
							unpack8(kr[r][0], kk);
							unpack8(kr[r][1], kk + 8);
						}
#pragma unroll
						for (int h = 0; h < DL_MAXG; h++) {
							if (h >= G) break;
							const float4* qh = reinterpret_cast<const float4*>(qf + h * DL_HD + 16 * sub);
							float sc = 0.f;
#pragma unroll
							for (int d = 0; d < 4; d++) {
								const float4 qq = qh[d];
								sc += qq.x * kk[4 * d] + qq.y * kk[4 * d + 1] + qq.z * kk[4 * d + 2] + qq.w * kk[4 * d + 3];
							}
							sc += __shfl_xor_sync(FT_FULL, sc, 1);
							sc += __shfl_xor_sync(FT_FULL, sc, 2);
							sc += __shfl_xor_sync(FT_FULL, sc, 4);
							if (sub == 0 && j < te) scs[h * DL_TP + (j - tb)] = sc * scale;
						}
					}
				}
				__syncthreads();
				// Softmax of the tile, warp h for head h: the new running max,
				// the probabilities in place of the scores, the running sum.
				if (w < G) {
					const int nt = te - tb;
					float* sh = scs + w * DL_TP;
					float mx = -FT_INF;
					for (int i = lane; i < nt; i += 32) mx = fmaxf(mx, sh[i]);
					mx = warp_max(mx);
					const float mo = Mr[w], mn = fmaxf(mo, mx);
					float sum = 0.f;
					for (int i = lane; i < nt; i += 32) {
						const float e = exp2f(sh[i] - mn);
						sh[i] = e;
						sum += e;
					}
					sum = warp_sum(sum);
					__syncwarp();
					if (lane == 0) {
						const float a = mo == -FT_INF ? 0.f : exp2f(mo - mn);
						Al[w] = a;
						Sr[w] = Sr[w] * a + sum;
						Mr[w] = mn;
					}
				}
				__syncthreads();
				// P·V: warp w over positions tb + w + DL_WARPS·u, lane over dims 4·lane..4·lane+3.
#pragma unroll
				for (int h = 0; h < DL_MAXG; h++)
					if (h < G) {
						const float a = Al[h];
#pragma unroll
						for (int d = 0; d < 4; d++) o[h][d] *= a;
					}
				for (int jb = tb + w; jb < te; jb += DL_WARPS * DL_PU) {
					uint2 vn[DL_PU];
#pragma unroll
					for (int u = 0; u < DL_PU; u++) {
						const int j = jb + DL_WARPS * DL_PU + DL_WARPS * u;
						if (j < te && j != p) vn[u] = *reinterpret_cast<const uint2*>(vg + (usize)j * rs + 4 * lane);
					}
#pragma unroll
					for (int u = 0; u < DL_PU; u++) {
						const int j = jb + DL_WARPS * u;
						if (j >= te) break;
						float vv[4];
						if (j == p) {
#pragma unroll
							for (int e = 0; e < 4; e++) vv[e] = bf2f(__ldcg(vs + (usize)g * DL_HD + 4 * lane + e));
						} else {
							vv[0] = __uint_as_float(vr[u].x << 16);
							vv[1] = __uint_as_float(vr[u].x & 0xffff0000u);
							vv[2] = __uint_as_float(vr[u].y << 16);
							vv[3] = __uint_as_float(vr[u].y & 0xffff0000u);
						}
#pragma unroll
						for (int h = 0; h < DL_MAXG; h++) {
							if (h >= G) break;
							const float pj = scs[h * DL_TP + (j - tb)];
#pragma unroll
							for (int d = 0; d < 4; d++) o[h][d] += pj * vv[d];
						}
					}
#pragma unroll
					for (int u = 0; u < DL_PU; u++) vr[u] = vn[u];
				}
				__syncthreads(); // the scores are free for the next tile
			}
			// The warps' sums added in a tree of halvings through shared
			// memory, the total in warp 0.
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
							ph[0] = Mr[h];
							ph[1] = Sr[h];
						}
#pragma unroll
						for (int d = 0; d < 4; d++) ph[2 + 4 * lane + d] = o[h][d];
					}
			}
			__syncthreads();
		}
		dl_mark(tr, blk, 4);
		gen = dl_arrive(bar, nb);
		dl_wait(bar, gen);
		dl_mark(tr, blk, 5);

		// 3: merge the chunks into att, the H·128 outputs shared out over
		// all blocks, 16 lanes an output: lane i takes chunks i, i + 16, …,
		// then the lanes' (max, sum, acc) are combined in a fixed butterfly.
		{
			int r0, r1;
			dl_share(H * DL_HD, blk, nb, r0, r1);
			const int ci = threadIdx.x & 15;
			for (int base = r0; base < r1; base += DL_THREADS / 16) {
				const int oi = base + (threadIdx.x >> 4);
				float M = -FT_INF, S = 0.f, A = 0.f;
				if (oi < r1) {
					const int hq = oi / DL_HD, i = oi - hq * DL_HD;
					const int g = hq / G, h = hq - g * G;
					for (int c = ci; c < chunks; c += 16) {
						const float* pc = part + ((usize)(g * chunks + c) * G + h) * (DL_HD + 2);
						const float mc = __ldcg(pc), lc = __ldcg(pc + 1), ac = __ldcg(pc + 2 + i); // one round trip
						if (mc == -FT_INF) continue; // an empty chunk (its acc is not written)
						const float mn = fmaxf(M, mc);
						const float a0 = M == -FT_INF ? 0.f : exp2f(M - mn), a1 = exp2f(mc - mn);
						S = S * a0 + lc * a1;
						A = A * a0 + ac * a1;
						M = mn;
					}
				}
#pragma unroll
				for (int off = 8; off >= 1; off >>= 1) {
					const float Mo = __shfl_xor_sync(FT_FULL, M, off);
					const float So = __shfl_xor_sync(FT_FULL, S, off);
					const float Ao = __shfl_xor_sync(FT_FULL, A, off);
					const float mn = fmaxf(M, Mo);
					const float a0 = M == -FT_INF ? 0.f : exp2f(M - mn), a1 = Mo == -FT_INF ? 0.f : exp2f(Mo - mn);
					S = S * a0 + So * a1;
					A = A * a0 + Ao * a1;
					M = mn;
				}
				if (oi < r1 && ci == 0) att[oi] = f2bf(A / S);
			}
		}
		dl_mark(tr, blk, 6);
		gen = dl_arrive(bar, nb);
		dl_wait(bar, gen);
		dl_mark(tr, blk, 7);
	}

	// 4: x += WO·att.
	dl_copy_act(att, nq, hs, [] {});
	dl_gemv(1, o0, o1, Po, buf, &mb, ph, wo, 0, 0, D, 0, n8A, xv, x, qs, ks, vs, gate, &next);
	if (Po > 0) ph ^= 1u;
	dl_mark(tr, blk, 8);
	dl_share(I, blk, nb, t0, t1);
	P = dl_prefetch_count(2, t0, t1, n8D, pf);
	gen = dl_arrive(bar, nb);
	dl_prefetch(2, t0, P, wg, wu, 0, I, I, n8D, buf, &mb);
	dl_wait(bar, gen);
	dl_mark(tr, blk, 9);

	// 5: gate = silu(WGate·h)·(WUp·h), h = RMSNorm(x)·postNorm.
	dl_norm(x, postNorm, postEps, D, hs, red, [] {});
	dl_mark(tr, blk, 10);
	dl_gemv(2, t0, t1, P, buf, &mb, ph, wg, wu, 0, I, I, n8D, xv, x, qs, ks, vs, gate, &next);
	if (P > 0) ph ^= 1u;
	const int n8I = I >> 3;
	dl_share(D, blk, nb, o0, o1);
	P = dl_prefetch_count(3, o0, o1, n8I, pf);
	dl_mark(tr, blk, 11);
	gen = dl_arrive(bar, nb);
	dl_prefetch(3, o0, P, wd, 0, 0, D, 0, n8I, buf, &mb);
	dl_wait(bar, gen);
	dl_mark(tr, blk, 12);

	// 6: x += WDown·gate.
	dl_copy_act(gate, I, hs, [] {});
	dl_gemv(3, o0, o1, P, buf, &mb, ph, wd, 0, 0, D, 0, n8I, xv, x, qs, ks, vs, gate, &next);
	dl_mark(tr, blk, 13);
}
