// Transposed one-query decode attention on tensor cores (issues 15 and 21):
// the pipelined kernel of decode_pipe.cu (a cp.async ring per warp, the
// split count chosen on the device, the last block merging the splits with
// decode_pipe_merge) with the products turned around so that the keys, not
// the query heads, fill the 16 rows of mma.m16n8k16:
//
//   - Sᵀ = K·Qᵀ: A is a 16-key tile of K, row-major [key][d] in shared
//     memory, loaded with ldmatrix; B is Qᵀ, the G ≤ 8 query heads of the
//     KV head as the 8 columns (HD/16 k-steps, two registers each, held for
//     the whole loop). The Q-as-A layout of decode_pipe.cu fills 4 of 16
//     rows at G = 4 and needs twice the products.
//   - Oᵀ = Vᵀ·Pᵀ: A is Vᵀ (d as rows), ldmatrix.trans of the same [key][d]
//     tile of V; B is Pᵀ, made from the Sᵀ accumulator by one movmatrix
//     (8×8 transpose) per 8 keys. The accumulator Oᵀ is HD×8 fp32: HD/4
//     registers a lane (32 at d128, against 64).
//   - the copies: each lane copies 16-byte chunk lane%(HD/8) of whole
//     rows, a warp instruction 512 contiguous-row bytes; a row's chunks sit
//     XOR-swizzled by row%8 (chunk c of row r at c ^ (r&7)), so that
//     ldmatrix's eight rows of one chunk hit eight different bank groups.
//     A lane reads what other lanes copied: the warp meets at __syncwarp
//     after the wait and before a stage is overwritten.
//   - the online softmax per 16-key tile: the column maxima over the
//     tile's keys (three shuffles a column), and Oᵀ rescaled only when some
//     column's maximum grew (a warp vote): at long contexts most tiles skip
//     the HD/4 multiplies.
//
// A lane's columns are the query heads 2(lane%4) and 2(lane%4)+1; its
// running maxima m0, m1 are the same in the eight lanes of a column, its
// sums l0, l1 are its own keys' shares (reduced over the column's lanes at
// the end). Math as decode_mma.cu: base-2 softmax of q·k·scale_log2,
// probabilities rounded to bf16 for the products, sums in fp32.
//
// Dynamic shared memory: the ring, NW·S stages of 16·HD·2 bytes of keys
// then as many of values (the same bytes as decode_pipe.cu's ring), or the
// merge's scratch where larger (decode.go's pipeVariant.smem).
//
// Where the time goes at context 8,192 (issue 21; Llama-3-8B shape: 8 KV
// heads, G = 4, d128; the default s3w4h1t; an estimate from the code and
// the Nsight figures of 19.2 µs a layer, 1.79 TB/s, 8 warps an SM):
//   - grid: the ring is 96 KiB a block, so 2 blocks (8 warps) an SM and a
//     wave of 264 blocks; decode.go sizes the grid at 264/8 = 33 splits. On
//     the device ns = min(⌈8,193/128⌉, 33) = 33, chunk ⌈8,193/33⌉ → 256:
//     32 splits of 256 positions and a 33rd of one. 8 × 33 = 264 blocks:
//     exactly one wave, no grid tail.
//   - bytes in flight: a warp owns 4 groups of 16 keys (8 KiB of keys and
//     values each); the prologue issues 2 and iteration 0 a third before its
//     first wait, so 24 KiB a warp, 192 KiB an SM, ~25 MB of the layer's
//     33.5 MB are requested within one latency, the rest one group later.
//     Bytes in flight are not what limits this context: the stream is a
//     drain of the whole layer, 8.4 µs at 4.0 TB/s, ~11–12 µs as measured
//     (the 2.7 TB/s marginal rate). What moves it is the SM side of the
//     copies: 16 cp.async instructions (512 sixteen-byte requests through
//     L1TEX) a warp and group, ~1M 16-byte requests a layer, at 0.18
//     instructions a cycle a scheduler (the warps sit in the wait).
//   - a warp's dependent chain a group: wait, 8 ldmatrix, 8 dependent MMAs
//     (Sᵀ), 3 shuffle rounds a column maximum, a vote, 4 exp2, 2 movmatrix,
//     8 ldmatrix.trans + 8 independent MMAs: ~450–550 cycles (~0.25 µs), so
//     ~1 µs of a warp's 4 groups, hidden under the drain but the last
//     group's (~0.25 µs).
//   - block tail: the warps' partials through shared memory, the split's
//     partials to global memory, __threadfence and the counter atomic:
//     ~1 µs.
//   - merge: the last of 33 blocks of each KV head reads 33 × 4 × 128
//     floats (67 KB) and the (max, sum) pairs with 128 threads, ~7
//     dependent L2 round trips: ~2 µs (the FAST merge's 2–3 round trips
//     measured no faster, so at most ~1 µs is there to gain).
//   - launch, dependent-launch wait, prologue (split arithmetic, query
//     loads, first issue): ~2–3 µs (the whole kernel is ~7 µs at 512).
// So ~3–4 µs of the 19 are the stream running below the HBM rate, ~2 µs
// the merge, ~3 µs fixed.
//
// Tried for the first and removed (s12a, H200 2026-12-02; do not re-try as
// is): filling each ring stage by cp.async.bulk, one 256-byte row a lane
// completing on an mbarrier a stage (FT_DECODE_VARIANT s3w4h1b, the
// default's shape, and s6w2h1b, 2 warps with 6 stages). The resident step
// took 4.96 and 5.12–5.15 ms at context 8,192 against the default's
// 4.61–4.64, and s6w2h1b 6.29 against 5.40 at 32,000: small bulk copies do
// not stream faster than 16-byte cp.async here.

// cp_async16_s copies 16 bytes from global memory to the shared-memory
// address dst (a 32-bit shared address, as smem_u32 gives).
__device__ __forceinline__ void cp_async16_s(unsigned dst, const void* src) {
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

// ldsm_x4 is ldmatrix_x4 at a 32-bit shared address; ldsm_x4_t its
// transposed form.
__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], unsigned addr) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		: "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(unsigned (&r)[4], unsigned addr) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		: "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}

// movmatrix_t transposes an 8×8 b16 matrix held across the warp as
// ldmatrix leaves it (lane l: row l/4, columns 2(l%4) and 2(l%4)+1).
__device__ __forceinline__ unsigned movmatrix_t(unsigned a) {
	unsigned d;
	asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(a));
	return d;
}

// Thread-block clusters (sm_90 and later; decode_cluster_merge): the
// block's rank in its cluster, a barrier of every thread of the cluster
// (arrive with release, wait with acquire: the shared-memory writes before
// it are seen by every block of the cluster after it), and a 32-bit
// shared address of this block mapped to block rank's (mapa) and read.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FT_CLUSTER_Y(n) __cluster_dims__(1, n, 1)
__device__ __forceinline__ unsigned cluster_rank() {
	unsigned r;
	asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
	return r;
}
__device__ __forceinline__ void cluster_sync_all() {
	asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
__device__ __forceinline__ float ld_cluster_f32(unsigned addr, unsigned rank) {
	unsigned a;
	float v;
	asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(addr), "r"(rank));
	asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(a) : "memory");
	return v;
}
// st_cluster_f32 stores v at block rank's copy of the 32-bit shared address
// addr (mapa, then st.shared::cluster).
__device__ __forceinline__ void st_cluster_f32(unsigned addr, unsigned rank, float v) {
	unsigned a;
	asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(addr), "r"(rank));
	asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(a), "f"(v) : "memory");
}
// The two halves of the cluster barrier apart: arrive with release or
// relaxed (no ordering) semantics, and wait with acquire.
__device__ __forceinline__ void cluster_arrive_release() { asm volatile("barrier.cluster.arrive.release;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory"); }
#else
#define FT_CLUSTER_Y(n)
#endif

// cluster_started is the start of a push-merge cluster block
// (decode_cluster_push): it arrives at the cluster barrier without
// waiting, so that the wait before the block's first store into another
// block's shared memory knows every block of the cluster has started.
// Before sm_90 it is empty.
__device__ __forceinline__ void cluster_started() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	cluster_arrive_relaxed();
#endif
}

// cluster_combine is the merged output Σ 2^(m_r − M)·o_r / Σ 2^(m_r − M)·l_r
// of CS splits' partials (m_r their running maxima, l_r their sums, o_r
// their partial outputs; M the largest m_r), the splits in rank order:
// the one arithmetic of both cluster merges, so that they give the same
// bits.
template <int CS>
__device__ __forceinline__ float cluster_combine(const float* m, const float* l, const float* o) {
	float M = m[0];
#pragma unroll
	for (int r = 1; r < CS; r++) M = fmaxf(M, m[r]);
	float O = 0.f, L = 0.f;
#pragma unroll
	for (int r = 0; r < CS; r++) {
		const float f = exp2f(m[r] - M);  // an empty split: m = −∞, f = 0
		O += f * o[r];
		L += f * l[r];
	}
	return O / L;
}

// decode_cluster_merge is decode_pipe_merge for the CS splits of a KV head
// launched as one cluster (decode_tr_body's CS; one KV head a block): each
// block combines its warps' partials per head into its shared memory
// (cp[G][HD] after so, then (m, l) per head), the cluster meets, and block
// r writes the outputs r·NW·32, r·NW·32 + CS·NW·32, … of the G·HD, each
// read from every block's cp through distributed shared memory; the
// cluster meets again before any block leaves (its shared memory must
// stay while the others read it). No global partials, no fence, no
// counter: s29c's block trace put ~6 µs of the 8.7 µs attention a layer
// (FP8 step, context 512) between the warps' last group and the merged
// output, in those round trips. Before sm_90 it compiles to nothing (the
// backend launches the twins only on sm_90).
template <int HD, int NW, int CS>
__device__ __forceinline__ void decode_cluster_merge(bf16_t* out, float* so, const float (*sm_m)[8], const float (*sm_l)[8], int H,
		int G, int t) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	const int tid = threadIdx.x;
	const usize hb = (usize)blockIdx.x * G;
	float* cp = so + NW * 8 * HD;  // so's rows are the warps' (w·8 + head)
	float* cml = cp + G * HD;
	for (int j = tid; j < G * HD; j += NW * 32) {
		const int gq = j / HD, dd = j - gq * HD;
		float M, O, L;
		decode_warp_combine<HD, NW, 1>(so, sm_m, sm_l, 0, gq, dd, M, O, L);
		cp[j] = O;
		if (dd == 0) {
			cml[2 * gq] = M;
			cml[2 * gq + 1] = L;
		}
	}
	cluster_sync_all();
	FT_TRACE_MARK(2);  // every split's partial is in its block's shared memory
	const unsigned rank = cluster_rank();
	for (int j = rank * NW * 32 + tid; j < G * HD; j += CS * NW * 32) {
		const int gq = j / HD;
		const unsigned ao = smem_u32(cp + j), am = smem_u32(cml + 2 * gq);
		constexpr int NR = CS > 1 ? CS : 1;  // CS ≤ 1 instantiates this (never run)
		float m[NR], l[NR], o[NR];
#pragma unroll
		for (int r = 0; r < CS; r++) {
			m[r] = ld_cluster_f32(am, r);
			l[r] = ld_cluster_f32(am + 4, r);
			o[r] = ld_cluster_f32(ao, r);
		}
		out[((usize)t * H + hb) * HD + j] = f2bf(cluster_combine<CS>(m, l, o));
	}
	FT_TRACE_MARK(3);  // this block's outputs are written
	cluster_sync_all();
#endif
}

// decode_cluster_push is decode_cluster_merge the other way round: each
// block combines its warps' partials per head and stores them straight
// into the shared memory of the block that owns those outputs (block r
// owns the G·HD/CS outputs from r·G·HD/CS; its receive area rcv, past the
// ring and the warps' scratch, holds [CS][G·HD/CS] partial outputs and
// then [CS][8] (m, l) pairs, every head's pair sent to every block); the
// cluster meets once (arrive with release, wait with acquire), and each
// block merges its own outputs from its own shared memory with
// cluster_combine, as decode_cluster_merge does (the same bits). After
// that meeting no block touches another's shared memory, so each leaves
// as soon as it has written: one cluster barrier instead of two, and
// stores that need no round trip instead of dependent remote loads
// (s30a's trace had ~1.3 µs between a block's last output and its end,
// the second barrier). The wait before the first store ends the barrier phase that
// cluster_started opened at the block's start.
template <int HD, int NW, int CS>
__device__ __forceinline__ void decode_cluster_push(bf16_t* out, const float* so, float* rcv, const float (*sm_m)[8],
		const float (*sm_l)[8], int H, int G, int t) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	const int tid = threadIdx.x;
	const usize hb = (usize)blockIdx.x * G;
	const int n = G * HD, per = n / CS;  // HD % CS == 0
	float* rml = rcv + n;                // [CS][8][2]
	const unsigned rank = cluster_rank();
	cluster_wait();  // every block of the cluster has started
	for (int j = tid; j < n; j += NW * 32) {
		const int gq = j / HD, dd = j - gq * HD;
		float M, O, L;
		decode_warp_combine<HD, NW, 1>(so, sm_m, sm_l, 0, gq, dd, M, O, L);
		const int owner = j / per;
		st_cluster_f32(smem_u32(rcv + rank * per + (j - owner * per)), owner, O);
		if (dd == 0) {
			const unsigned am = smem_u32(rml + (rank * 8 + gq) * 2);
			for (int r = 0; r < CS; r++) {
				st_cluster_f32(am, r, M);
				st_cluster_f32(am + 4, r, L);
			}
		}
	}
	cluster_arrive_release();
	cluster_wait();
	FT_TRACE_MARK(2);  // every split's partials of this block's outputs are here
	for (int s = tid; s < per; s += NW * 32) {
		const int j = rank * per + s, gq = j / HD;
		constexpr int NR = CS > 1 ? CS : 1;  // CS ≤ 1 instantiates this (never run)
		float m[NR], l[NR], o[NR];
#pragma unroll
		for (int r = 0; r < CS; r++) {
			m[r] = rml[(r * 8 + gq) * 2];
			l[r] = rml[(r * 8 + gq) * 2 + 1];
			o[r] = rcv[r * per + s];
		}
		out[((usize)t * H + hb) * HD + j] = f2bf(cluster_combine<CS>(m, l, o));
	}
	FT_TRACE_MARK(3);  // this block's outputs are written
#endif
}

// decode_tr_body: block (kvh, split, t) = blockIdx (x, y, z), NW·32
// threads, S ring stages per warp, query row t and KV head kvh; arguments,
// splits and outputs as decode_pipe_body's with one KV head a block.
//
// PRE (contiguous caches only): the split and the prologue's copies of the
// stages whose 16 rows all lie before the step's first new position are
// issued before ft_pdl_wait. The kernel just ahead of this one (rope_store,
// gemv3_rope_store under FT_FUSE_ROPE, or qknorm_rope_store) writes only
// the new positions' rows and the queries, and its blocks let this one
// start only after their own ft_pdl_wait (common.cuh: the trigger follows
// the wait), so every kernel before it has completed and those rows, and
// the position read by pipe_split, are settled. Any kernel placed directly
// before the decode attention must write no cache row older than the
// step's first new position. The copies of the older keys and values then
// overlap that kernel; the query, and the stages with new rows, come after
// the wait. The stages a warp may copy early are a prefix of its stages
// (its groups go up in position), so the commit groups keep their order.
//
// CS > 1 (the cluster twins below): the grid's CS splits of a KV head are
// one thread-block cluster, the launch passes nsplit = CS and minChunk 0
// (every split takes a CS-th of the span, possibly nothing), and the
// splits merge through distributed shared memory (decode_cluster_merge)
// instead of global partials and a counter; PUSH: decode_cluster_push
// instead of decode_cluster_merge.
template <int HD, int S, int NW, bool FAST, bool PAGED, bool PRE = false, int CS = 0, bool PUSH = false>
__device__ __forceinline__ void decode_tr_body(bf16_t* out, float* po, float* pml, int* cnt, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int H, int K, int nsplit, int minChunk, const int* rows, const int* table, int maxBlocks, int bs,
		const int* posp, int pos0, float scale_log2, int window) {
	constexpr int CH = HD / 8;          // 16-byte chunks of a row
	constexpr int KS = HD / 16;         // k-steps of Sᵀ, 16-row tiles of Oᵀ
	constexpr int ROW = HD * 2;         // bytes of a row
	constexpr int TILE = 16 * ROW;      // bytes of 16 keys (or values)
	constexpr int STAGE = 2 * TILE;     // keys, then values
	constexpr int RPI = 32 / CH;        // rows one warp copy instruction covers
	constexpr int NI = 16 / RPI;        // copy instructions per tile and operand
	static_assert(CH >= 8 && CH <= 32, "decode_tr_body: head width 64 or 128 (the swizzle needs 8 chunks a row)");
	extern __shared__ uint4 pipe_smem[];
	__shared__ float sm_m[NW][8], sm_l[NW][8];
	__shared__ int isLast;
	constexpr bool EARLY = PRE && !PAGED;
	if (!FAST && !EARLY) ft_pdl_wait();
	const int split = blockIdx.y, t = blockIdx.z;
	const int G = H / K, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int kvh = blockIdx.x;
	const int g = lane >> 2, tg = lane & 3;
	const int* tab;
	int n, lo, ns, beg, end;
	if (!pipe_split<PAGED>(rows, table, maxBlocks, posp, pos0, t, window, minChunk, nsplit, split, tab, n, lo, ns, beg, end))
		return;  // the whole block
	if (CS > 1 && PUSH) cluster_started();
	const usize rs = (usize)K * HD;  // elements between cache rows
	const bf16_t* kb = kc + (usize)kvh * HD;
	const bf16_t* vb = vc + (usize)kvh * HD;

	// Qᵀ as B: qb[j] = Q[g][16j+2tg, +1] and Q[g][16j+8+2tg, +1] (zero for
	// g ≥ G: those columns' scores are 0 and never written).
	unsigned qb[KS][2];
	auto loadQ = [&]() {
		const unsigned* qr = (const unsigned*)(q + ((usize)t * H + (usize)kvh * G + (g < G ? g : 0)) * HD) + tg;
#pragma unroll
		for (int j = 0; j < KS; j++) {
			qb[j][0] = g < G ? qr[8 * j] : 0u;
			qb[j][1] = g < G ? qr[8 * j + 4] : 0u;
		}
	};
	if (!FAST && !EARLY) loadQ();
	// Oᵀ: o[md] holds rows d = 16md+g, 16md+8+g, columns 2tg, 2tg+1.
	float o[KS][4];
#pragma unroll
	for (int md = 0; md < KS; md++) o[md][0] = o[md][1] = o[md][2] = o[md][3] = 0.f;
	float m0 = -FT_INF, m1 = -FT_INF, l0 = 0.f, l1 = 0.f;

	// rowOf: the cache row of position p (past end: the split's first row,
	// whose probability is zero and values finite).
	auto rowOf = [&](int p) -> int {
		if (p >= end) p = beg;
		return PAGED ? tab[p / bs] * bs + p % bs : p;
	};
	const int ng = end > beg ? (end - beg + 15) >> 4 : 0;
	const int myg = ng > warp ? (ng - warp + NW - 1) / NW : 0;  // warp-uniform
	auto first = [&](int i) -> int { return beg + (warp + NW * i) * 16; };
	const unsigned ring = smem_u32(pipe_smem) + warp * (S * STAGE);
	// The copies: lane copies chunk cc of rows kk = kr0 + RPI·x, x < NI, to
	// dofs[x] in the stage (the swizzle); the same offsets every group.
	const int cc = lane % CH, kr0 = lane / CH;
	unsigned dofs[NI];
#pragma unroll
	for (int x = 0; x < NI; x++) {
		const int kk = kr0 + RPI * x;
		dofs[x] = kk * ROW + ((cc ^ (kk & 7)) << 4);
	}
	const long long vdiff = vb - kb;  // elements from a key to its value
	// issue starts the copies of group i into stage st; row is this lane's
	// row of key lane&15 (PAGED; the contiguous rows are the positions).
	auto issue = [&](unsigned st, int i, int row) {
		const int p0 = first(i);
		if (!PAGED && p0 + 16 <= end) {
			// A whole group: rows p0 .. p0+15, RPI·rs elements per step.
			const bf16_t* src = kb + (usize)(p0 + kr0) * rs + 8 * cc;
			const usize step = (usize)RPI * rs;
#pragma unroll
			for (int x = 0; x < NI; x++) {
				cp_async16_s(st + dofs[x], src);
				cp_async16_s(st + TILE + dofs[x], src + vdiff);
				src += step;
			}
			return;
		}
#pragma unroll
		for (int x = 0; x < NI; x++) {
			const int kk = kr0 + RPI * x;
			const int r = PAGED ? __shfl_sync(FT_FULL, row, kk) : min(p0 + kk, end - 1);
			const bf16_t* src = kb + (usize)r * rs + 8 * cc;
			cp_async16_s(st + dofs[x], src);
			cp_async16_s(st + TILE + dofs[x], src + vdiff);
		}
	};

	int pr[S];
#pragma unroll
	for (int s = 0; s < S; s++) pr[s] = s < myg ? rowOf(first(s) + (lane & 15)) : 0;
	if (FAST) {
		// The first S groups' key (lanes 0-15) and value (16-31) rows into
		// L2 before the wait (a hint; decode_pipe.cu's FAST says why it is
		// safe).
		const char* pb = (const char*)(lane < 16 ? kb : vb);
#pragma unroll
		for (int s = 0; s < S; s++) {
			if (s < myg) {
				const char* p = pb + (usize)pr[s] * rs * 2;
#pragma unroll
				for (int x = 0; x < ROW; x += 128) prefetch_l2(p + x);
			}
		}
		ft_pdl_wait();
	}
	int pre = 0;  // stages issued before the wait (EARLY)
	if (EARLY) {
		const int fresh = n - 1 - t;  // the step's first new position
#pragma unroll
		for (int s = 0; s < S - 1; s++) {
			if (pre == s && s < myg && first(s) + 16 <= min(end, fresh)) {
				issue(ring + s * STAGE, s, pr[s]);
				cp_async_commit();
				pre++;
			}
		}
		ft_pdl_wait();
	}
#pragma unroll
	for (int s = 0; s < S - 1; s++) {
		if (s < pre) continue;
		if (s < myg) issue(ring + s * STAGE, s, pr[s]);
		cp_async_commit();
	}
	if (FAST || EARLY) loadQ();
	// ldmatrix lanes: K (A, [key][d]): matrix lane/8 is rows 8((lane/8)&1)..
	// +7, chunk 2j + lane/16; Vᵀ (A by .trans): keys 8(lane/16) .. +7,
	// chunk 2md + (lane/8)&1. Both rows are ≡ lane (mod 8): the swizzle.
	const int sw = lane & 7;
	const unsigned kaddr = (((lane >> 3) & 1) * 8 + sw) * ROW;
	const int kh = lane >> 4;
	const unsigned vaddr = TILE + ((lane >> 4) * 8 + sw) * ROW;
	const int vh = (lane >> 3) & 1;
	int nrow = pr[S - 1];
	// Stages: group i in st (i%S), group i+S−1 copied into wst ((i−1)%S).
	const unsigned ringEnd = ring + S * STAGE;
	unsigned st = ring, wst = ring + (S - 1) * STAGE;
	for (int i = 0; i < myg; i++) {
		const int nx = i + S - 1;
		__syncwarp();  // every lane's reads of stage wst (iteration i−1) are done
		if (nx < myg) issue(wst, nx, nrow);
		cp_async_commit();
		if (PAGED && nx + 1 < myg) nrow = rowOf(first(nx + 1) + (lane & 15));
		wst = st;
		cp_async_wait_n<S - 1>();
		__syncwarp();  // the other lanes' copies of group i are in too
		if (i == 0) FT_TRACE_MARK(0);  // warp 0's first group is in
		const int p0 = first(i);
		// All key fragments first, then the products (ldsm is volatile:
		// interleaved, each product would wait for its load).
		unsigned ka[KS][4];
#pragma unroll
		for (int j = 0; j < KS; j++) ldsm_x4(ka[j], st + kaddr + (((2 * j + kh) ^ sw) << 4));
		float s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
		for (int j = 0; j < KS; j++) mma_bf16(s, ka[j], qb[j][0], qb[j][1]);
		// s: keys p0+g (0, 1) and p0+g+8 (2, 3), heads 2tg, 2tg+1.
#pragma unroll
		for (int e = 0; e < 4; e++) s[e] *= scale_log2;
		if (p0 + 16 > end) {
			if (p0 + g >= end) s[0] = s[1] = -FT_INF;
			if (p0 + g + 8 >= end) s[2] = s[3] = -FT_INF;
		}
		float mx0 = fmaxf(s[0], s[2]), mx1 = fmaxf(s[1], s[3]);
#pragma unroll
		for (int x = 4; x < 32; x <<= 1) {
			mx0 = fmaxf(mx0, __shfl_xor_sync(FT_FULL, mx0, x));
			mx1 = fmaxf(mx1, __shfl_xor_sync(FT_FULL, mx1, x));
		}
		// Finite: key p0 < end is visible in every column.
		const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
		if (__any_sync(FT_FULL, mn0 > m0 || mn1 > m1)) {
			const float a0 = exp2f(m0 - mn0), a1 = exp2f(m1 - mn1);  // m = −∞: 0
			l0 *= a0;
			l1 *= a1;
#pragma unroll
			for (int md = 0; md < KS; md++) {
				o[md][0] *= a0;
				o[md][1] *= a1;
				o[md][2] *= a0;
				o[md][3] *= a1;
			}
			m0 = mn0;
			m1 = mn1;
		}
		const float e0 = exp2f(s[0] - m0), e1 = exp2f(s[1] - m1), e2 = exp2f(s[2] - m0), e3 = exp2f(s[3] - m1);
		l0 += e0 + e2;
		l1 += e1 + e3;
		// Pᵀ as B: lane holds P[head g][keys 2tg, 2tg+1] (b0) and +8 (b1):
		// the transposes of the Sᵀ accumulator's two 8×8 halves.
		const unsigned b0 = movmatrix_t(pack_bf16(e0, e1)), b1 = movmatrix_t(pack_bf16(e2, e3));
#pragma unroll
		for (int md = 0; md < KS; md++) {
			unsigned a[4];
			ldsm_x4_t(a, st + vaddr + (((2 * md + vh) ^ sw) << 4));
			mma_bf16(o[md], a, b0, b1);
		}
		st += STAGE;
		if (st == ringEnd) st = ring;
	}
	cp_async_wait0();
#pragma unroll
	for (int x = 4; x < 32; x <<= 1) {
		l0 += __shfl_xor_sync(FT_FULL, l0, x);
		l1 += __shfl_xor_sync(FT_FULL, l1, x);
	}
	FT_TRACE_MARK(1);  // warp 0's groups are done
	// The rings are done with (every warp): reuse them as so[NW][8][HD].
	__syncthreads();
	float* so = (float*)pipe_smem;
	const int h0 = 2 * tg, h1 = 2 * tg + 1;
#pragma unroll
	for (int md = 0; md < KS; md++) {
		const int d = 16 * md + g;
		if (h0 < G) {
			so[(warp * 8 + h0) * HD + d] = o[md][0];
			so[(warp * 8 + h0) * HD + d + 8] = o[md][2];
		}
		if (h1 < G) {
			so[(warp * 8 + h1) * HD + d] = o[md][1];
			so[(warp * 8 + h1) * HD + d + 8] = o[md][3];
		}
	}
	if (g == 0) {
		if (h0 < G) {
			sm_m[warp][h0] = m0;
			sm_l[warp][h0] = l0;
		}
		if (h1 < G) {
			sm_m[warp][h1] = m1;
			sm_l[warp][h1] = l1;
		}
	}
	__syncthreads();
	if (CS > 1 && PUSH) {
		constexpr int RING = NW * S * STAGE, SO = NW * 8 * HD * 4;  // bytes
		float* rcv = (float*)((char*)pipe_smem + (RING > SO ? RING : SO));
		decode_cluster_push<HD, NW, CS>(out, so, rcv, sm_m, sm_l, H, G, t);
	} else if (CS > 1)
		decode_cluster_merge<HD, NW, CS>(out, so, sm_m, sm_l, H, G, t);
	else
		decode_pipe_merge<HD, NW, 1, FAST>(out, po, pml, cnt, so, sm_m, sm_l, isLast, H, G, nsplit, ns, split, t);
}

// FT_TR_VARIANT defines the two kernels of one transposed variant (head
// width HD, S stages, NW warps, one KV head a block; F: f for the FAST
// path of decode_pipe.cu, p for PRE (a p variant's paged kernel compiles
// to the plain variant's: PRE applies to contiguous caches), else empty),
// with the arguments and grids of decode_pipe.cu's kernels of the same
// names:
//
// attn_decode_pipe_d{HD}_s{S}w{NW}h1t{F}_bf16 over a contiguous cache;
// attn_paged_decode_pipe_d{HD}_s{S}w{NW}h1t{F}_bf16 over paged pools.
#define FT_TR_VARIANT(HD, S, NW, F, FAST, PRE)                                                                                              \
	extern "C" __global__ void __launch_bounds__(NW * 32, FT_PIPE_MINB(HD, S, NW))                                                     \
			attn_decode_pipe_d##HD##_s##S##w##NW##h1t##F##_bf16(bf16_t* out, float* po, float* pml, int* cnt, const bf16_t* q,            \
					const bf16_t* kc, const bf16_t* vc, int H, int K, int nsplit, int minChunk, const int* posp, int pos0,                 \
					float scale_log2, int window) {                                                                                        \
		decode_tr_body<HD, S, NW, FAST, false, PRE>(out, po, pml, cnt, q, kc, vc, H, K, nsplit, minChunk, nullptr, nullptr, 0, 1, posp, pos0, \
				scale_log2, window);                                                                                                       \
	}                                                                                                                                  \
	extern "C" __global__ void __launch_bounds__(NW * 32, FT_PIPE_MINB(HD, S, NW))                                                     \
			attn_paged_decode_pipe_d##HD##_s##S##w##NW##h1t##F##_bf16(bf16_t* out, float* po, float* pml, int* cnt, const bf16_t* q,      \
					const bf16_t* kc, const bf16_t* vc, int H, int K, int nsplit, int minChunk, const int* rows, const int* table,         \
					int maxBlocks, int bs, float scale_log2, int window) {                                                                 \
		decode_tr_body<HD, S, NW, FAST, true, PRE>(out, po, pml, cnt, q, kc, vc, H, K, nsplit, minChunk, rows, table, maxBlocks, bs, nullptr, \
				0, scale_log2, window);                                                                                                    \
	}

// The transposed variants; decode.go's pipeVariants lists them (Tr).
FT_TR_VARIANT(128, 3, 4, , false, false)
FT_TR_VARIANT(128, 2, 4, , false, false)
FT_TR_VARIANT(128, 4, 2, , false, false)
FT_TR_VARIANT(128, 3, 2, , false, false)
FT_TR_VARIANT(128, 3, 4, f, true, false)
FT_TR_VARIANT(128, 4, 2, f, true, false)
FT_TR_VARIANT(128, 3, 4, p, false, true)
FT_TR_VARIANT(128, 2, 4, p, false, true)
// Deeper rings or more warps with the early copies (session 28): at short
// contexts every group of a warp, not just the first S − 1, may be copied
// before the wait (s5w4: 4 groups a warp, 256 positions a split), or a
// split of twice the positions takes the same groups a warp (w8).
FT_TR_VARIANT(128, 5, 4, p, false, true)
FT_TR_VARIANT(128, 4, 4, p, false, true)
FT_TR_VARIANT(128, 3, 8, p, false, true)
FT_TR_VARIANT(128, 2, 8, p, false, true)

// FT_TR_CLUSTER_VARIANT defines the cluster twin of the contiguous PRE
// kernel attn_decode_pipe_d{HD}_s{S}w{NW}h1tp_bf16 (same arguments) for CS
// splits: attn_decode_pipe_d{HD}_s{S}w{NW}h1tp{M}{CS}_bf16, a grid of
// K × CS × T blocks in clusters of (1, CS, 1), launched with nsplit = CS and
// minChunk 0; po, pml and cnt are unused. M is c (decode_cluster_merge,
// PUSH false) or q (decode_cluster_push, PUSH true: the launch adds the
// receive area to the dynamic shared memory).
#define FT_TR_CLUSTER_VARIANT(HD, S, NW, CS, M, PUSH)                                                                                   \
	extern "C" __global__ void FT_CLUSTER_Y(CS) __launch_bounds__(NW * 32, FT_PIPE_MINB(HD, S, NW))                                   \
			attn_decode_pipe_d##HD##_s##S##w##NW##h1tp##M##CS##_bf16(bf16_t* out, float* po, float* pml, int* cnt, const bf16_t* q,      \
					const bf16_t* kc, const bf16_t* vc, int H, int K, int nsplit, int minChunk, const int* posp, int pos0,                 \
					float scale_log2, int window) {                                                                                        \
		decode_tr_body<HD, S, NW, false, false, true, CS, PUSH>(out, po, pml, cnt, q, kc, vc, H, K, nsplit, minChunk, nullptr, nullptr, 0,    \
				1, posp, pos0, scale_log2, window);                                                                                        \
	}

// The cluster twins of the short-cache default s2w8h1tp (cluster.go's
// clusterFor: 2, 4 or 8 splits by the cache's capacity), merging by
// pushes (q, the default) and by remote loads (c, FT_DECODE_CLUSTER_PUSH=0).
FT_TR_CLUSTER_VARIANT(128, 2, 8, 2, c, false)
FT_TR_CLUSTER_VARIANT(128, 2, 8, 4, c, false)
FT_TR_CLUSTER_VARIANT(128, 2, 8, 8, c, false)
FT_TR_CLUSTER_VARIANT(128, 2, 8, 2, q, true)
FT_TR_CLUSTER_VARIANT(128, 2, 8, 4, q, true)
FT_TR_CLUSTER_VARIANT(128, 2, 8, 8, q, true)
