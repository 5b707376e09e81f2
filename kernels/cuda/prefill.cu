// Prefill attention on tensor cores, second version: one body for a
// contiguous cache (attn_prefill_*) and for packed sequences over a paged
// pool (attn_varlen_prefill_*); the only difference is how a position's
// cache row is found (prefill_contig, prefill_paged). Same math and results
// as flash_body (attention.cu) and varlen_flash_body (paged.cu), which stay
// as the FT_FLASH=legacy path:
//   out[t,h,:] = Σ_{lo ≤ p ≤ P} softmax_p(q_t·k_p/√d)·v_p, P = pos+t, lo =
//   max(0, P−window+1) with a sliding window (window > 0), else 0,
// in base 2 on scores pre-multiplied by log2(e)/√d, fp32 accumulation, the
// probabilities rounded to bf16 for P·V.
//
// What differs from flash_body:
//   - 128 query rows per block (8 warps × 16 rows, 256 threads), so each
//     key/value tile staged in shared memory serves twice the queries;
//   - keys and values double-buffered (2 stages × (K, V) × 64 positions,
//     dynamic shared memory): tile j+1's copies are in flight during tile
//     j's math, one barrier per tile;
//   - causal and window masks only on the tiles that cross a warp's diagonal
//     or window start; a warp skips the math of tiles it cannot see;
//   - the score scale folded into the exponent (one FFMA + ex2 per score);
//   - grid (heads, query tiles): blocks start in the order longest query
//     tile first over all heads, so the causal triangle's short tiles fill
//     the tail, and the query heads of one KV head run side by side (their
//     keys and values are read from L2 once).

#define PREFILL_BM 128  // query rows per block
#define PREFILL_BN 64   // key positions per tile
#define PREFILL_NT 256  // threads per block

// prefill_contig: position p of a contiguous cache [C,K,d] is row p.
struct prefill_contig {
	usize rs;  // elements between positions
	__device__ __forceinline__ usize row(int p) const { return (usize)p * rs; }
};

// prefill_paged: position p of a sequence in a paged pool is the row its
// block table gives (paged_row).
struct prefill_paged {
	const int* tab;
	int bs;
	usize rs;
	__device__ __forceinline__ usize row(int p) const { return paged_row(tab, bs, p) * rs; }
};

// prefill_ex2 is 2^x (ex2.approx, ftz; 2^−∞ = 0).
__device__ __forceinline__ float prefill_ex2(float x) {
	float r;
	asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
	return r;
}

// prefill_smem_bytes is the dynamic shared memory of the HD kernels: two
// stages of a key and a value tile, rows padded to HD+8 elements.
#define PREFILL_SMEM(HD) (2 * 2 * PREFILL_BN * ((HD) + 8) * 2)

// prefill_load issues the async copies of the keys and values of positions
// [j0, j0+64) of KV head kvh into the tiles ks and vs (row stride HD+8);
// rows at or past kvEnd are zero-filled (their probabilities are 0, and a
// zero value keeps 0·v finite). Every row address is computed before the
// first copy is issued, so a paged pool's table reads overlap.
template <int HD, class KV>
__device__ __forceinline__ void prefill_load(bf16_t* ks, bf16_t* vs, const bf16_t* kc, const bf16_t* vc, const KV& kv, int kvh,
		int j0, int kvEnd) {
	constexpr int LD = HD + 8, CPR = HD / 8;  // 16-byte chunks per row
	constexpr int RPP = PREFILL_NT / CPR;     // rows per pass: 16, 32, 64 for d 128, 64, 32
	constexpr int NP = PREFILL_BN / RPP;      // passes
	const int cc = (threadIdx.x % CPR) * 8, r0 = threadIdx.x / CPR;
	usize off[NP];
#pragma unroll
	for (int i = 0; i < NP; i++) {
		const int p = j0 + r0 + i * RPP;
		off[i] = p < kvEnd ? kv.row(p) + (usize)kvh * HD + cc : 0;
	}
#pragma unroll
	for (int i = 0; i < NP; i++) {
		const int r = r0 + i * RPP;
		bf16_t* dk = ks + r * LD + cc;
		bf16_t* dv = vs + r * LD + cc;
		if (j0 + r < kvEnd) {
			cp_async16(dk, kc + off[i]);
			cp_async16(dv, vc + off[i]);
		} else {
			*(uint4*)dk = make_uint4(0u, 0u, 0u, 0u);
			*(uint4*)dv = make_uint4(0u, 0u, 0u, 0u);
		}
	}
}

// prefill_body computes query tile qtile (rows qtile·128.. of q and out,
// T rows in all, at positions pos..pos+T−1) of head h over KV head kvh.
// q and out point at the sequence's first row; rows are H·HD apart.
template <int HD, class KV>
__device__ __forceinline__ void prefill_body(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int T, int H, int h,
		int kvh, int qtile, int pos, float scale_log2, int window, const KV& kv) {
	constexpr int BN = PREFILL_BN, LD = HD + 8;
	constexpr int KS = HD / 16;  // k-steps of S over the head dimension
	constexpr int NB = BN / 8;   // 8-key column blocks of S
	constexpr int ND = HD / 8;   // 8-wide column blocks of O
	constexpr int STAGE = 2 * BN * LD;
	extern __shared__ __attribute__((aligned(16))) bf16_t prefill_sm[];
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int g = lane >> 2, tg = lane & 3;
	const int t0 = qtile * PREFILL_BM + warp * 16;  // this warp's first row
	const usize qs = (usize)H * HD;                 // elements between tokens of q and out

	unsigned qf[KS][4];
	{
		const int r0 = t0 + g, r1 = r0 + 8;
		const bf16_t* q0 = q + (usize)r0 * qs + (usize)h * HD;
		const bf16_t* q1 = q + (usize)r1 * qs + (usize)h * HD;
#pragma unroll
		for (int kk = 0; kk < KS; kk++) {
			const int c = kk * 16 + 2 * tg;
			qf[kk][0] = r0 < T ? *(const unsigned*)(q0 + c) : 0u;
			qf[kk][1] = r1 < T ? *(const unsigned*)(q1 + c) : 0u;
			qf[kk][2] = r0 < T ? *(const unsigned*)(q0 + c + 8) : 0u;
			qf[kk][3] = r1 < T ? *(const unsigned*)(q1 + c + 8) : 0u;
		}
	}
	float o[ND][4];
#pragma unroll
	for (int nd = 0; nd < ND; nd++) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.f;
	float m0 = -FT_INF, m1 = -FT_INF, l0 = 0.f, l1 = 0.f;  // running max (scaled) and this thread's share of the row sums
	const int lastRow = min(T, qtile * PREFILL_BM + PREFILL_BM) - 1;
	const int kvEnd = pos + lastRow + 1;
	const int ntiles = (kvEnd + BN - 1) / BN;
	const int qp0 = pos + t0 + g, qp1 = qp0 + 8;
	// A key at kp is visible to the query at qp when lo(qp) ≤ kp ≤ qp.
	const int lo0 = window > 0 ? qp0 - window + 1 : 0, lo1 = window > 0 ? qp1 - window + 1 : 0;
	const int jfirst = window > 0 ? max(0, pos + qtile * PREFILL_BM - window + 1) / BN : 0;
	// The warp's query positions wq0..wq1 (rows past T included: they see
	// only zero-filled or real keys and are never written).
	const int wq0 = pos + t0, wq1 = wq0 + 15;
	const bool live = t0 < T;

	prefill_load<HD>(prefill_sm, prefill_sm + BN * LD, kc, vc, kv, kvh, jfirst * BN, kvEnd);
	cp_async_commit();
	for (int j = jfirst; j < ntiles; j++) {
		const bf16_t* Ks = prefill_sm + ((j - jfirst) & 1) * STAGE;
		const bf16_t* Vs = Ks + BN * LD;
		cp_async_wait0();  // this thread's copies of tile j (the only group in flight) are done
		__syncthreads();   // everyone's are, and every warp is done with tile j−1's stage
		if (j + 1 < ntiles) {
			bf16_t* nk = prefill_sm + ((j + 1 - jfirst) & 1) * STAGE;
			prefill_load<HD>(nk, nk + BN * LD, kc, vc, kv, kvh, (j + 1) * BN, kvEnd);
		}
		cp_async_commit();
		const int j0 = j * BN;
		// Warp-uniform: does any of the warp's queries see a key of the tile,
		// and does any key need a mask?
		if (!live || j0 > wq1 || (window > 0 && j0 + BN - 1 < wq0 - window + 1)) continue;
		const bool edge = j0 + BN - 1 > wq0 || (window > 0 && j0 < wq1 - window + 1);

		float s[NB][4];
#pragma unroll
		for (int nb = 0; nb < NB; nb++) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
#pragma unroll
		for (int kk = 0; kk < KS; kk++) {
#pragma unroll
			for (int nb = 0; nb < NB; nb += 2) {
				unsigned b0, b1, b2, b3;
				const int row = nb * 8 + (lane & 7) + ((lane >> 4) << 3);
				const int col = kk * 16 + ((lane >> 3) & 1) * 8;
				ldmatrix_x4(b0, b1, b2, b3, Ks + row * LD + col);
				mma_bf16(s[nb], qf[kk], b0, b1);
				mma_bf16(s[nb + 1], qf[kk], b2, b3);
			}
		}
		if (edge) {
#pragma unroll
			for (int nb = 0; nb < NB; nb++) {
				const int kp = j0 + nb * 8 + 2 * tg;
				if (kp > qp0 || kp < lo0) s[nb][0] = -FT_INF;
				if (kp + 1 > qp0 || kp + 1 < lo0) s[nb][1] = -FT_INF;
				if (kp > qp1 || kp < lo1) s[nb][2] = -FT_INF;
				if (kp + 1 > qp1 || kp + 1 < lo1) s[nb][3] = -FT_INF;
			}
		}
		float mx0 = -FT_INF, mx1 = -FT_INF;
#pragma unroll
		for (int nb = 0; nb < NB; nb++) {
			mx0 = fmaxf(mx0, fmaxf(s[nb][0], s[nb][1]));
			mx1 = fmaxf(mx1, fmaxf(s[nb][2], s[nb][3]));
		}
		mx0 = fmaxf(mx0, __shfl_xor_sync(FT_FULL, mx0, 1));
		mx0 = fmaxf(mx0, __shfl_xor_sync(FT_FULL, mx0, 2));
		mx1 = fmaxf(mx1, __shfl_xor_sync(FT_FULL, mx1, 1));
		mx1 = fmaxf(mx1, __shfl_xor_sync(FT_FULL, mx1, 2));
		const float mn0 = fmaxf(m0, mx0 * scale_log2), mn1 = fmaxf(m1, mx1 * scale_log2);
		// A row whose visible keys all lie in later tiles (a window) stays at
		// zero instead of NaN until its window starts.
		const float ms0 = mn0 == -FT_INF ? 0.f : mn0, ms1 = mn1 == -FT_INF ? 0.f : mn1;
		const float a0 = prefill_ex2(m0 - ms0), a1 = prefill_ex2(m1 - ms1);
		m0 = mn0;
		m1 = mn1;
		float rs0 = 0.f, rs1 = 0.f;
#pragma unroll
		for (int nb = 0; nb < NB; nb++) {
			s[nb][0] = prefill_ex2(fmaf(s[nb][0], scale_log2, -ms0));
			s[nb][1] = prefill_ex2(fmaf(s[nb][1], scale_log2, -ms0));
			s[nb][2] = prefill_ex2(fmaf(s[nb][2], scale_log2, -ms1));
			s[nb][3] = prefill_ex2(fmaf(s[nb][3], scale_log2, -ms1));
			rs0 += s[nb][0] + s[nb][1];
			rs1 += s[nb][2] + s[nb][3];
		}
		l0 = l0 * a0 + rs0;
		l1 = l1 * a1 + rs1;
#pragma unroll
		for (int nd = 0; nd < ND; nd++) {
			o[nd][0] *= a0;
			o[nd][1] *= a0;
			o[nd][2] *= a1;
			o[nd][3] *= a1;
		}
#pragma unroll
		for (int kk = 0; kk < NB / 2; kk++) {
			unsigned pf[4];
			pf[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
			pf[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
			pf[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
			pf[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
			for (int nd = 0; nd < ND; nd += 2) {
				unsigned b0, b1, b2, b3;
				const int row = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
				const int col = nd * 8 + ((lane >> 4) << 3);
				ldmatrix_x4_trans(b0, b1, b2, b3, Vs + row * LD + col);
				mma_bf16(o[nd], pf, b0, b1);
				mma_bf16(o[nd + 1], pf, b2, b3);
			}
		}
	}
	cp_async_wait0();
	l0 += __shfl_xor_sync(FT_FULL, l0, 1);
	l0 += __shfl_xor_sync(FT_FULL, l0, 2);
	l1 += __shfl_xor_sync(FT_FULL, l1, 1);
	l1 += __shfl_xor_sync(FT_FULL, l1, 2);
	const float i0 = l0 > 0.f ? 1.f / l0 : 0.f, i1 = l1 > 0.f ? 1.f / l1 : 0.f;
	const int r0 = t0 + g, r1 = r0 + 8;
#pragma unroll
	for (int nd = 0; nd < ND; nd++) {
		const int c = nd * 8 + 2 * tg;
		if (r0 < T) *(unsigned*)(out + (usize)r0 * qs + (usize)h * HD + c) = pack_bf16(o[nd][0] * i0, o[nd][1] * i0);
		if (r1 < T) *(unsigned*)(out + (usize)r1 * qs + (usize)h * HD + c) = pack_bf16(o[nd][2] * i1, o[nd][3] * i1);
	}
}

// prefill_contig_body: block (h, y) = (blockIdx.x, blockIdx.y) takes query
// tile gridDim.y−1−y (the latest, longest first) of head h over a contiguous
// cache; the step's first token sits at ft_pos(posp, pos0).
template <int HD>
__device__ __forceinline__ void prefill_contig_body(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int T, int H,
		int K, const int* posp, int pos0, float scale_log2, int window) {
	const int h = blockIdx.x;
	const prefill_contig kv = {(usize)K * HD};
	prefill_body<HD>(out, q, kc, vc, T, H, h, h / (H / K), gridDim.y - 1 - blockIdx.y, ft_pos(posp, pos0), scale_log2, window, kv);
}

// prefill_varlen_body: block (h, i) = (blockIdx.x, blockIdx.y) takes query
// tile tiles[2i+1] (128 rows) of sequence s = tiles[2i], whose n_s =
// qStarts[s+1]−qStarts[s] queries are rows qStarts[s].. of q and out, at
// positions lens[s]−n_s..lens[s]−1, over that sequence's keys and values,
// read through its row of the block table (maxBlocks entries of bs
// positions). The host lists the tiles longest first.
template <int HD>
__device__ __forceinline__ void prefill_varlen_body(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int H, int K,
		const int* tiles, const int* qStarts, const int* lens, const int* table, int maxBlocks, int bs, float scale_log2, int window) {
	const int h = blockIdx.x;
	const int seq = tiles[2 * blockIdx.y], qtile = tiles[2 * blockIdx.y + 1];
	const int q0 = qStarts[seq], T = qStarts[seq + 1] - q0;
	const usize qs = (usize)H * HD;
	const prefill_paged kv = {table + (usize)seq * maxBlocks, bs, (usize)K * HD};
	prefill_body<HD>(out + (usize)q0 * qs, q + (usize)q0 * qs, kc, vc, T, H, h, h / (H / K), qtile, lens[seq] - T, scale_log2, window,
		kv);
}

// attn_prefill_d32_bf16 (likewise _d64_, _d128_): causal GQA prefill of
// q[T,H,d] at positions pos.. over the caches [C,K,d]; grid (H,
// ceil(T/128)), 256 threads, PREFILL_SMEM(d) bytes of dynamic shared memory.
extern "C" __global__ void __launch_bounds__(PREFILL_NT, 2) attn_prefill_d32_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_contig_body<32>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}

// attn_prefill_d64_bf16 is attn_prefill_d32_bf16 for head width 64.
extern "C" __global__ void __launch_bounds__(PREFILL_NT, 2) attn_prefill_d64_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_contig_body<64>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}

// attn_prefill_d128_bf16 is attn_prefill_d32_bf16 for head width 128.
extern "C" __global__ void __launch_bounds__(PREFILL_NT, 1) attn_prefill_d128_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_contig_body<128>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}

// attn_varlen_prefill_d32_bf16 (likewise _d64_, _d128_): packed sequences
// over a paged pool, as prefill_varlen_body; grid (H, tiles), 256 threads,
// PREFILL_SMEM(d) bytes of dynamic shared memory.
extern "C" __global__ void __launch_bounds__(PREFILL_NT, 2) attn_varlen_prefill_d32_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_varlen_body<32>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}

// attn_varlen_prefill_d64_bf16 is attn_varlen_prefill_d32_bf16 for head width 64.
extern "C" __global__ void __launch_bounds__(PREFILL_NT, 2) attn_varlen_prefill_d64_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_varlen_body<64>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}

// attn_varlen_prefill_d128_bf16 is attn_varlen_prefill_d32_bf16 for head width 128.
extern "C" __global__ void __launch_bounds__(PREFILL_NT, 1) attn_varlen_prefill_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_varlen_body<128>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
