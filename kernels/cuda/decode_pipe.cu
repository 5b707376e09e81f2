// Pipelined one-query decode attention on tensor cores (issues 15 and 21):
// the math and fragment layout of decode_mma.cu (read that file's comment
// first), with three changes aimed at HBM bandwidth:
//
//   - keys and values stream through a per-warp ring of S shared-memory
//     stages filled by cp.async: while a warp multiplies one 16-key group,
//     the next S−1 groups' loads are in flight (decode_mma.cu has one group
//     in flight per warp, in registers). Each thread copies exactly the
//     16-byte pieces it later reads back (the same pieces decode_mma.cu
//     loads into registers), so a thread's cp.async.wait_group alone makes
//     them visible: no block or warp barrier per group. Slot (stage, piece,
//     lane) sits at ((stage·SLOTS + piece)·32 + lane)·16 bytes: the 32
//     lanes of a read touch 512 consecutive bytes, free of bank conflicts.
//     The block-table lookups (paged) run one group ahead of the copies.
//   - the number of splits a (query row, KV head) pair really uses is
//     chosen on the device from its visible span: at most nsplit (the
//     grid's), at least minChunk positions each; the other blocks of the
//     grid return at once. The grid can be sized by the cache capacity (a
//     captured graph replays at every position) while a short context takes
//     few splits, so little partial traffic and a short merge.
//   - the last block to finish merges the splits wide: the (max, sum) pairs
//     of all splits are read at once into shared memory, each warp reduces
//     a head's over its lanes, and the outputs are summed by threads that
//     each own a 16-byte column slice and a share of the splits, with eight
//     splits' loads in flight per thread (decode_mma.cu walks the splits one
//     after another per output element).
//
// Tuning (template arguments, one compiled kernel per variant; decode.go's
// pipeVariants lists them and FT_DECODE_VARIANT picks one at run time):
//   - S ring stages per warp (S−1 groups in flight while a warp multiplies);
//   - NW warps per block;
//   - KPB KV heads per block: warp w takes head blockIdx.x·KPB + w%KPB and,
//     with the other NW/KPB warps of that head, every (NW/KPB)-th group of
//     the split, so a block reads KPB·256 contiguous bytes of each cache
//     row (d128) instead of one 256-byte piece;
//   - KROW: the key copies cover whole 256-byte rows, two rows per warp
//     instruction (four full 128-byte lines, half the requests of the
//     reader's own pieces, eight half lines); a lane then reads pieces other
//     lanes copied, so the warp meets at __syncwarp after the wait and
//     before overwriting a stage.
//   - FAST: aimed at the fixed cost of a launch (at context 512 a layer's
//     attention is ~11 µs for 2 MB): each warp's first S groups of keys
//     and values are prefetched into L2 before ft_pdl_wait (so their DRAM
//     latency overlaps the kernel before, which writes only the newest
//     rows; a prefetch reads nothing into the thread, so a row it writes
//     is still read after the wait, from L2), the query is loaded after
//     the first copies are issued, and the last block's merge reads each
//     split's (max, sum) once, all at once, with the first 16 splits' partial
//     outputs already in flight (two round trips to L2 where the plain
//     merge takes four or more).
//
// Dynamic shared memory: the larger of the ring, NW·S·SLOTS·512 bytes, and
// the scratch after the loop (the warps' partial outputs and the merge's
// factors and sums, which grow with the splits); decode.go's pipeSmem
// computes it.

// FT_PIPE_MAXSPLIT is the most splits a (row, head block) pair uses; a grid
// with more uses only the first FT_PIPE_MAXSPLIT (decode.go caps it too).
#define FT_PIPE_MAXSPLIT 256

// cp_async_wait_n waits until at most N of this thread's cp.async groups are
// still pending.
template <int N>
__device__ __forceinline__ void cp_async_wait_n() {
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ld_cg_f4 reads 16 bytes through L2 (not L1): another block's partials.
__device__ __forceinline__ float4 ld_cg_f4(const float* p) {
	float4 v;
	asm volatile("ld.global.cg.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
	return v;
}

// ld_cg_f2 reads 8 bytes through L2: a split's (max, sum) pair.
__device__ __forceinline__ float2 ld_cg_f2(const float* p) {
	float2 v;
	asm volatile("ld.global.cg.v2.f32 {%0,%1}, [%2];" : "=f"(v.x), "=f"(v.y) : "l"(p));
	return v;
}

// pipe_split is where split `split` of query row t reads in a pipelined
// decode: the row sees positions lo .. n-1 (n its length, lo after the
// window); it uses ns = clamp(ceil(span / minChunk), 1, nsplit) splits (or
// nsplit with minChunk 0) of chunk positions each, a multiple of 16, and
// this split takes beg .. end-1. tab is the row's block table (paged), or
// nullptr. False: this split has nothing to read (split >= ns).
template <bool PAGED>
__device__ __forceinline__ bool pipe_split(const int* rows, const int* table, int maxBlocks, const int* posp, int pos0, int t,
		int window, int minChunk, int nsplit, int split, const int*& tab, int& n, int& lo, int& ns, int& beg, int& end) {
	tab = nullptr;
	if (PAGED) {
		tab = table + (usize)rows[2 * t] * maxBlocks;
		n = rows[2 * t + 1] + 1;
	} else {
		n = ft_pos(posp, pos0) + t + 1;
	}
	lo = window > 0 ? max(0, n - window) : 0;
	const int span = n - lo;
	ns = minChunk > 0 ? (span + minChunk - 1) / minChunk : nsplit;
	ns = max(1, min(ns, min(nsplit, FT_PIPE_MAXSPLIT)));
	if (split >= ns) return false;
	const int chunk = ((span + ns - 1) / ns + 15) & ~15;
	beg = lo + split * chunk;
	end = min(n, beg + chunk);
	return true;
}

// decode_warp_combine folds the NW/KPB warps' partials of head gg of block
// head hh (warps hh, hh + KPB, …) at dimension dd: M their largest running
// maximum, O = Σ 2^(m_w − M)·so[w·8 + gg][dd] and L = Σ 2^(m_w − M)·l_w (0
// and 0 where every warp's maximum is −∞), in warp order.
template <int HD, int NW, int KPB>
__device__ __forceinline__ void decode_warp_combine(const float* so, const float (*sm_m)[8], const float (*sm_l)[8], int hh, int gg,
		int dd, float& M, float& O, float& L) {
	constexpr int WPH = NW / KPB;  // warps per KV head
	M = -FT_INF;
#pragma unroll
	for (int x = 0; x < WPH; x++) M = fmaxf(M, sm_m[hh + KPB * x][gg]);
	O = 0.f;
	L = 0.f;
	if (M != -FT_INF) {
#pragma unroll
		for (int x = 0; x < WPH; x++) {
			const int w = hh + KPB * x;
			const float f = exp2f(sm_m[w][gg] - M);
			O += f * so[(w * 8 + gg) * HD + dd];
			L += f * sm_l[w][gg];
		}
	}
}

// decode_pipe_merge is the end of a pipelined decode block (decode_pipe_body
// here, decode_tr_body in decode_tr.cu) once its NW warps have left their
// partial outputs in so[NW][8][HD] (so = the block's dynamic shared
// memory, head gg of warp w at row w·8+gg) and their running maxima and
// sums in sm_m, sm_l, after a block barrier: the warps' partials are
// combined per head; one split (ns == 1) writes out, else the block
// writes its split's partials and the last of the ns blocks of (t,
// blockIdx.x) to finish merges them (isLast: the block's shared flag).
template <int HD, int NW, int KPB, bool FAST>
__device__ __forceinline__ void decode_pipe_merge(bf16_t* out, float* po, float* pml, int* cnt, float* so, const float (*sm_m)[8],
		const float (*sm_l)[8], int& isLast, int H, int G, int nsplit, int ns, int split, int t) {
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	// The block's heads: GK = KPB·G consecutive query heads from hb; head
	// gq = hh·G + gg is head gg of block head hh, whose warps are hh,
	// hh+KPB, ...
	const int GK = KPB * G;
	const usize hb = (usize)blockIdx.x * GK;
	const usize base = ((usize)t * nsplit + split) * H + hb;
	for (int j = tid; j < GK * HD; j += NW * 32) {
		const int gq = j / HD, dd = j - gq * HD;
		const int hh = gq / G, gg = gq - hh * G;
		float M, O, L;
		decode_warp_combine<HD, NW, KPB>(so, sm_m, sm_l, hh, gg, dd, M, O, L);
		if (ns == 1) {
			out[((usize)t * H + hb + gq) * HD + dd] = f2bf(O / L);
		} else {
			po[(base + gq) * HD + dd] = O;
			if (dd == 0) {
				pml[(base + gq) * 2] = M;
				pml[(base + gq) * 2 + 1] = L;
			}
		}
	}
	if (ns == 1) return;
	// The last block of (t, kb) to finish merges the ns splits.
	__threadfence();
	__syncthreads();
	const usize ci = (usize)t * gridDim.x + blockIdx.x;
	if (tid == 0) isLast = atomicAdd(cnt + ci, 1) == ns - 1;
	__syncthreads();
	FT_TRACE_MARK(2);  // the split's partials are out and counted
	if (!isLast) return;
	__threadfence();
	FT_TRACE_MARK(3);  // the last block of the KV head starts the merge
	// Scratch after so (dead now): fs[sp·GK + gq] (each split's factor
	// 2^(m−M)), finv[GK] (1/Σ), red (per-phase sums, max(GK·HD/4, NW·32)
	// float4; 16-byte aligned: GK rounded up to 4).
	float* fs = so + NW * 8 * HD;
	float* finv = fs + ns * GK;
	float4* red = (float4*)(finv + ((GK + 3) & ~3) + ((ns * GK) & 3 ? 4 - ((ns * GK) & 3) : 0));
	// Outputs: items = GK·HD/4 column slices of 4; P phases of threads share
	// the splits (phase ph takes splits ph, ph+P, ...), U splits' loads in
	// flight per thread; a thread takes slices it0, it0+NW·32, ...
	constexpr int QH = HD / 4;       // slices per head
	constexpr int U = 16;            // splits in flight per thread
	const int items = GK * QH;
	const int P = items >= NW * 32 ? 1 : (NW * 32) / items;
	const int ph = items >= NW * 32 ? 0 : tid / items;
	const int it0 = items >= NW * 32 ? tid : tid - ph * items;
	const bool mine = ph < P && it0 < items;  // the thread has a first slice
	// load fetches the U splits sp0, sp0+P, ... of slice it (zero past ns).
	auto load = [&](float4 (&v)[U], int it, int sp0) {
#pragma unroll
		for (int u = 0; u < U; u++) {
			const int sp = sp0 + P * u;
			v[u] = sp < ns ? ld_cg_f4(po + (((usize)t * nsplit + sp) * H + hb) * HD + 4 * it) : make_float4(0.f, 0.f, 0.f, 0.f);
		}
	};
	// fold adds the loads v of splits sp0, sp0+P, ... of head gq to acc.
	auto fold = [&](float4& acc, const float4 (&v)[U], int gq, int sp0) {
#pragma unroll
		for (int u = 0; u < U; u++) {
			const int sp = sp0 + P * u;
			const float f = sp < ns ? fs[sp * GK + gq] : 0.f;
			acc.x += f * v[u].x;
			acc.y += f * v[u].y;
			acc.z += f * v[u].z;
			acc.w += f * v[u].w;
		}
	};
	// FAST: the first U splits of the first slice are loaded before the
	// factors, so the two round trips to L2 overlap.
	float4 v0[U];
	if (FAST && mine) load(v0, it0, ph);
	for (int gq = warp; gq < GK; gq += NW) {
		const usize mlb = ((usize)t * nsplit * H + hb + gq) * 2;  // split sp at mlb + sp·H·2
		float M = -FT_INF, L = 0.f;
		if (FAST) {
			// Each (m, l) read once, all of a lane's at once (ns ≤ 256).
			float2 ml[FT_PIPE_MAXSPLIT / 32];
#pragma unroll
			for (int k = 0; k < FT_PIPE_MAXSPLIT / 32; k++) {
				const int sp = lane + 32 * k;
				ml[k] = sp < ns ? ld_cg_f2(pml + mlb + (usize)sp * H * 2) : make_float2(-FT_INF, 0.f);
				M = fmaxf(M, ml[k].x);
			}
#pragma unroll
			for (int x = 16; x > 0; x >>= 1) M = fmaxf(M, __shfl_xor_sync(FT_FULL, M, x));
#pragma unroll
			for (int k = 0; k < FT_PIPE_MAXSPLIT / 32; k++) {
				const int sp = lane + 32 * k;
				if (sp < ns) {
					const float f = exp2f(ml[k].x - M);  // an empty split: m = −∞, f = 0
					fs[sp * GK + gq] = f;
					L += f * ml[k].y;
				}
			}
		} else {
			for (int sp = lane; sp < ns; sp += 32) M = fmaxf(M, ld_cg_f32(pml + mlb + (usize)sp * H * 2));
#pragma unroll
			for (int x = 16; x > 0; x >>= 1) M = fmaxf(M, __shfl_xor_sync(FT_FULL, M, x));
			// M is finite: split 0 holds position lo.
			for (int sp = lane; sp < ns; sp += 32) {
				const float* ml = pml + mlb + (usize)sp * H * 2;
				const float f = exp2f(ld_cg_f32(ml) - M);  // an empty split: m = −∞, f = 0
				fs[sp * GK + gq] = f;
				L += f * ld_cg_f32(ml + 1);
			}
		}
		L = warp_sum(L);
		if (lane == 0) finv[gq] = 1.f / L;
	}
	__syncthreads();
	for (int it = it0; mine && it < items; it += NW * 32) {
		const int gq = it / QH;
		float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
		int sp0 = ph;
		if (FAST && it == it0) {
			fold(acc, v0, gq, sp0);
			sp0 += P * U;
		}
		for (; sp0 < ns; sp0 += P * U) {
			float4 v[U];
			load(v, it, sp0);
			fold(acc, v, gq, sp0);
		}
		red[ph * items + it] = acc;
	}
	__syncthreads();
	for (int it = tid; it < items; it += NW * 32) {
		float4 r = red[it];
		for (int p = 1; p < P; p++) {
			const float4 x = red[p * items + it];
			r.x += x.x;
			r.y += x.y;
			r.z += x.z;
			r.w += x.w;
		}
		const int gq = it / QH, d0 = (it - gq * QH) * 4;
		const float inv = finv[gq];
		bf16_t* op = out + ((usize)t * H + hb + gq) * HD + d0;
		op[0] = f2bf(r.x * inv);
		op[1] = f2bf(r.y * inv);
		op[2] = f2bf(r.z * inv);
		op[3] = f2bf(r.w * inv);
	}
	if (tid == 0) cnt[ci] = 0;
}

// decode_pipe_body: block (kb, split, t) = blockIdx (x, y, z), NW·32
// threads, S ring stages, query row t and KV heads kb·KPB .. +KPB; rows,
// table, posp as in decode_mma_body. The pair uses ns = clamp(ceil(span /
// minChunk), 1, nsplit) splits of span = the visible positions (blocks
// with split ≥ ns return); split i takes positions lo + i·chunk .. +chunk,
// chunk = ceil(span/ns) rounded up to 16. One split writes out itself; else
// each writes its partials po[t, split, h, :], pml[t, split, h] and the
// last of the ns to finish (cnt[t·(K/KPB)+kb], zero between launches and
// left zero) merges them.
template <int HD, int S, int NW, int KPB, bool KROW, bool FAST, bool PAGED>
__device__ __forceinline__ void decode_pipe_body(bf16_t* out, float* po, float* pml, int* cnt, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int H, int K, int nsplit, int minChunk, const int* rows, const int* table, int maxBlocks, int bs,
		const int* posp, int pos0, float scale_log2, int window) {
	constexpr int WPH = NW / KPB;           // warps per KV head
	constexpr int KJ = HD / 32;             // 16-byte key pieces per key and thread
	constexpr int VU = HD / 64;             // 16-byte value pieces per key and thread
	constexpr int ND = HD / 8;              // 8-column blocks of the output
	constexpr int SLOTS = 2 * KJ + 4 * VU;  // 16-byte pieces per thread and stage
	constexpr int RP = HD / 8;              // 16-byte pieces of one key row (KROW)
	static_assert(NW % KPB == 0, "decode_pipe_body: NW must be a multiple of KPB");
	extern __shared__ uint4 pipe_smem[];
	__shared__ float sm_m[NW][8], sm_l[NW][8];
	__shared__ int isLast;
	// FAST: the wait comes after the L2 prefetch below (the position, rows
	// and block table it reads are written by copies, not kernels).
	if (!FAST) ft_pdl_wait();
	const int split = blockIdx.y, t = blockIdx.z;
	const int G = H / K, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int hi = warp % KPB, wi = warp / KPB;  // this warp's head in the block, its place among the head's warps
	const int kvh = blockIdx.x * KPB + hi;
	const int g = lane >> 2, tg = lane & 3;
	const int* tab;
	int n, lo, ns, beg, end;
	if (!pipe_split<PAGED>(rows, table, maxBlocks, posp, pos0, t, window, minChunk, nsplit, split, tab, n, lo, ns, beg, end))
		return;  // the whole block: no barrier is skipped by part of it
	const usize rs = (usize)K * HD;  // elements between cache rows
	const bf16_t* kb = kc + (usize)kvh * HD;
	const bf16_t* vb = vc + (usize)kvh * HD;

	// Query fragments: Q[g][32j+8tg .. +7] for row g < G (zero otherwise);
	// FAST loads them after the prologue's copies are issued.
	uint4 qa[KJ];
	auto loadQ = [&]() {
		const bf16_t* qr = q + ((usize)t * H + (usize)kvh * G + (g < G ? g : 0)) * HD + 8 * tg;
#pragma unroll
		for (int j = 0; j < KJ; j++) qa[j] = g < G ? *(const uint4*)(qr + 32 * j) : make_uint4(0u, 0u, 0u, 0u);
	};
	if (!FAST) loadQ();
	float o[ND][4];
#pragma unroll
	for (int nd = 0; nd < ND; nd++) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.f;
	float m = -FT_INF, l = 0.f;

	// rowOf: the cache row of position p (past end: the split's first row,
	// whose probability is zero and values finite).
	auto rowOf = [&](int p) -> int {
		if (p >= end) p = beg;
		return PAGED ? tab[p / bs] * bs + p % bs : p;
	};
	// This warp's groups: the split's 16-key groups wi, wi+WPH, ...
	const int ng = end > beg ? (end - beg + 15) >> 4 : 0;
	const int myg = ng > wi ? (ng - wi + WPH - 1) / WPH : 0;  // warp-uniform
	auto first = [&](int i) -> int { return beg + (wi + WPH * i) * 16; };
	uint4* ring = pipe_smem + warp * (S * SLOTS * 32) + lane;
	// issue starts the copies of group i into stage i%S; row is this lane's
	// row of key lane&15 of the group. The whole warp calls it.
	auto issue = [&](int i, int row) {
		uint4* st = ring + (i % S) * (SLOTS * 32);
		if (KROW) {
			// Instruction x copies keys 2x and 2x+1 whole: lane L piece c = L%RP
			// of key 2x + L/RP, into the slot its reader (key k, piece c) takes:
			// lane 4(k%8) + c%4 of slot (k/8)·KJ + c/4.
			uint4* base = st - lane;
#pragma unroll
			for (int x = 0; x < 16 * RP / 32; x++) {
				const int key = (32 * x + lane) / RP, c = lane % RP;
				const int kr = __shfl_sync(FT_FULL, row, key);
				cp_async16(base + ((key / 8) * KJ + c / 4) * 32 + 4 * (key % 8) + c % 4, kb + (usize)kr * rs + 8 * c);
			}
		} else {
			const int kr0 = __shfl_sync(FT_FULL, row, g), kr1 = __shfl_sync(FT_FULL, row, 8 + g);
			const bf16_t* k0 = kb + (usize)kr0 * rs + 8 * tg;
			const bf16_t* k1 = kb + (usize)kr1 * rs + 8 * tg;
#pragma unroll
			for (int j = 0; j < KJ; j++) {
				cp_async16(st + j * 32, k0 + 32 * j);
				cp_async16(st + (KJ + j) * 32, k1 + 32 * j);
			}
		}
		const int vr[4] = {__shfl_sync(FT_FULL, row, 2 * tg), __shfl_sync(FT_FULL, row, 2 * tg + 1),
				__shfl_sync(FT_FULL, row, 8 + 2 * tg), __shfl_sync(FT_FULL, row, 9 + 2 * tg)};
#pragma unroll
		for (int r = 0; r < 4; r++) {
			const bf16_t* v = vb + (usize)vr[r] * rs + 8 * g;
#pragma unroll
			for (int u = 0; u < VU; u++) cp_async16(st + (2 * KJ + r * VU + u) * 32, v + 64 * u);
		}
	};

	// Prologue: the rows of the first S groups (lookups in parallel), the
	// copies of the first S−1. One commit per stage, empty or not, so that
	// the wait below counts groups the same way in every iteration.
	int pr[S];
#pragma unroll
	for (int s = 0; s < S; s++) pr[s] = s < myg ? rowOf(first(s) + (lane & 15)) : 0;
	if (FAST) {
		// The first S groups' key (lanes 0-15) and value (16-31) rows into
		// L2 while the kernel before may still run: only a hint, safe even
		// for the rows that kernel writes (L2 is where they land).
		const char* pb = (const char*)(lane < 16 ? kb : vb);
#pragma unroll
		for (int s = 0; s < S; s++) {
			if (s < myg) {
				const char* p = pb + (usize)pr[s] * rs * 2;
#pragma unroll
				for (int x = 0; x < HD * 2; x += 128) prefetch_l2(p + x);
			}
		}
		ft_pdl_wait();
	}
#pragma unroll
	for (int s = 0; s < S - 1; s++) {
		if (s < myg) issue(s, pr[s]);
		cp_async_commit();
	}
	if (FAST) loadQ();
	int nrow = pr[S - 1];  // the row of group i+S−1 at the top of iteration i
	for (int i = 0; i < myg; i++) {
		const int nx = i + S - 1;
		// Stage nx%S = (i−1)%S: this warp read it last iteration, and those
		// reads were consumed by its products, so they are done (KROW: in
		// every lane, which the __syncwarp makes sure of).
		if (KROW) __syncwarp();
		if (nx < myg) issue(nx, nrow);
		cp_async_commit();
		if (nx + 1 < myg) nrow = rowOf(first(nx + 1) + (lane & 15));
		// S+i groups committed; at most S−1 pending: groups 0..i are in.
		cp_async_wait_n<S - 1>();
		if (KROW) __syncwarp();  // the other lanes' key copies are in too
		const uint4* st = ring + (i % S) * (SLOTS * 32);
		uint4 kw0[KJ], kw1[KJ], vw[4][VU];
#pragma unroll
		for (int j = 0; j < KJ; j++) {
			kw0[j] = st[j * 32];
			kw1[j] = st[(KJ + j) * 32];
		}
#pragma unroll
		for (int r = 0; r < 4; r++) {
#pragma unroll
			for (int u = 0; u < VU; u++) vw[r][u] = st[(2 * KJ + r * VU + u) * 32];
		}
		const int p0 = first(i);

		decode_group<HD>(o, m, l, qa, kw0, kw1, vw, p0, end, tg, scale_log2);
	}
	cp_async_wait0();  // nothing non-empty is pending; make it explicit
	l += __shfl_xor_sync(FT_FULL, l, 1);
	l += __shfl_xor_sync(FT_FULL, l, 2);
	// The rings are done with (every warp): reuse them as so[NW][8][HD].
	__syncthreads();
	float* so = (float*)pipe_smem;
	if (g < G) {
#pragma unroll
		for (int nd = 0; nd < ND; nd++) {
			const int d0 = 64 * (nd / 8) + 16 * tg + nd % 8;  // columns 2tg and 2tg+1 of block nd
			so[(warp * 8 + g) * HD + d0] = o[nd][0];
			so[(warp * 8 + g) * HD + d0 + 8] = o[nd][1];
		}
		if (tg == 0) {
			sm_m[warp][g] = m;
			sm_l[warp][g] = l;
		}
	}
	__syncthreads();
	decode_pipe_merge<HD, NW, KPB, FAST>(out, po, pml, cnt, (float*)pipe_smem, sm_m, sm_l, isLast, H, G, nsplit, ns, split, t);
}

// FT_PIPE_MINB is the blocks per SM the ring of a variant leaves room for
// (228 KiB an SM, 1 KiB reserved a block; at most 4): the register bound
// of __launch_bounds__.
#define FT_PIPE_MINB(HD, S, NW) \
	((233472 / ((NW) * (S) * (HD) * 64 + 1024)) > 4 ? 4 : (233472 / ((NW) * (S) * (HD) * 64 + 1024)) < 1 ? 1 : (233472 / ((NW) * (S) * (HD) * 64 + 1024)))

// FT_PIPE_VARIANT defines the two kernels of one variant, named by head
// width HD, stages S, warps NW, KV heads per block KPB, key copy (r:
// whole rows, KROW; o: own pieces) and F (f: the FAST path, else empty):
//
// attn_decode_pipe_d{HD}_s{S}w{NW}h{KPB}{r|o}{f}_bf16 is decode_pipe_body over
// a contiguous cache [C,K,HD] (queries at positions ft_pos(posp,pos0)+t);
// grid (K/KPB, nsplit, T), NW·32 threads, decode.go's pipeSmem bytes of
// dynamic shared memory.
//
// attn_paged_decode_pipe_d{HD}_... is the same over paged pools [P,K,HD]
// with the query rows and block table of attn_paged_decode_mma_d*_bf16;
// grid (K/KPB, nsplit, rows).
#define FT_PIPE_VARIANT(HD, S, NW, KPB, KR, KROW, F, FAST)                                                                                   \
	extern "C" __global__ void __launch_bounds__(NW * 32, FT_PIPE_MINB(HD, S, NW))                                                     \
			attn_decode_pipe_d##HD##_s##S##w##NW##h##KPB##KR##F##_bf16(bf16_t* out, float* po, float* pml, int* cnt, const bf16_t* q,     \
					const bf16_t* kc, const bf16_t* vc, int H, int K, int nsplit, int minChunk, const int* posp, int pos0,                 \
					float scale_log2, int window) {                                                                                        \
		decode_pipe_body<HD, S, NW, KPB, KROW, FAST, false>(out, po, pml, cnt, q, kc, vc, H, K, nsplit, minChunk, nullptr, nullptr, 0, 1,  \
				posp, pos0, scale_log2, window);                                                                                           \
	}                                                                                                                                  \
	extern "C" __global__ void __launch_bounds__(NW * 32, FT_PIPE_MINB(HD, S, NW))                                                     \
			attn_paged_decode_pipe_d##HD##_s##S##w##NW##h##KPB##KR##F##_bf16(bf16_t* out, float* po, float* pml, int* cnt,               \
					const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int H, int K, int nsplit, int minChunk, const int* rows,          \
					const int* table, int maxBlocks, int bs, float scale_log2, int window) {                                               \
		decode_pipe_body<HD, S, NW, KPB, KROW, FAST, true>(out, po, pml, cnt, q, kc, vc, H, K, nsplit, minChunk, rows, table, maxBlocks,  \
				bs, nullptr, 0, scale_log2, window);                                                                                       \
	}

// The variants; decode.go's pipeVariants must list the same.
FT_PIPE_VARIANT(64, 4, 4, 1, o, false, , false)
FT_PIPE_VARIANT(128, 3, 4, 1, o, false, , false)
FT_PIPE_VARIANT(128, 3, 4, 1, r, true, , false)
FT_PIPE_VARIANT(128, 2, 4, 1, o, false, , false)
FT_PIPE_VARIANT(128, 2, 4, 1, r, true, , false)
FT_PIPE_VARIANT(128, 4, 4, 1, r, true, , false)
FT_PIPE_VARIANT(128, 3, 8, 1, r, true, , false)
FT_PIPE_VARIANT(128, 2, 4, 4, r, true, , false)
FT_PIPE_VARIANT(128, 3, 4, 4, r, true, , false)
FT_PIPE_VARIANT(128, 2, 8, 8, r, true, , false)
FT_PIPE_VARIANT(128, 3, 8, 8, r, true, , false)
// FAST ("f"): L2 prefetch of the first groups before ft_pdl_wait, the query
// loaded after the first copies, the merge's loads in one round trip; with
// 4, 2 and 1 warps a block (the batch: small blocks fill the SMs evenly).
FT_PIPE_VARIANT(128, 3, 4, 1, r, true, f, true)
FT_PIPE_VARIANT(128, 3, 2, 1, r, true, f, true)
FT_PIPE_VARIANT(128, 4, 2, 1, r, true, f, true)
FT_PIPE_VARIANT(128, 4, 1, 1, r, true, f, true)
FT_PIPE_VARIANT(128, 6, 1, 1, r, true, f, true)
