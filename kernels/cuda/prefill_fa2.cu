// Prefill attention, variant fa2 (FT_PREFILL_VARIANT=fa2): the layout of
// w4m32 (prefill_variants.cu: 128 query rows per block, 4 warps × 32 rows,
// 64-position key/value tiles double-buffered with cp.async, the score scale
// folded into one FFMA + ex2, masks on the tiles that cross a warp's
// diagonal or window start only, blocks longest tile first, the query heads
// of a KV head side by side) with the inner loop rewritten the way
// FlashAttention-2 schedules it. Same math and results as prefill_body
// (prefill.cu). What differs from prefill_vbody:
//   - shared-memory addresses are 32-bit and computed once per thread: every
//     ldmatrix of the loop is [register + constant], the loop carries no
//     per-fragment address arithmetic;
//   - the fragments are software-pipelined: the ldmatrix of the next k-step
//     (keys and queries for S = Q·Kᵀ, values for P·V) is issued before the
//     mma of the current one, so its latency hides behind four mma;
//   - P is packed to bf16 A fragments as soon as the softmax is done (the
//     fp32 scores die before P·V starts, fewer live registers);
//   - key/value rows past the sequence are zero-filled by cp.async itself
//     (src-size 0): one code path, no per-row branch;
//   - head width 64 keeps the query fragments in registers for the whole
//     key loop (there is room: 32 registers); 128 re-reads them from shared
//     memory each tile, as FlashAttention-2 does at that width;
//   - the output goes through shared memory (each warp's own query rows) to
//     16-byte coalesced stores.

#define FA2_BM 128  // query rows per block
#define FA2_BN 64   // key positions per tile
#define FA2_NT 128  // threads per block (4 warps × 32 rows)

// fa2_cp16 copies 16 bytes from global src to shared address dst
// asynchronously, or writes 16 zero bytes when valid is false (src is then
// not read but must be a mapped address).
__device__ __forceinline__ void fa2_cp16(unsigned dst, const void* src, bool valid) {
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

// fa2_ldsm is ldmatrix_x4 at a 32-bit shared address.
__device__ __forceinline__ void fa2_ldsm(unsigned* r, unsigned a) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		: "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

// fa2_ldsm_t is ldmatrix_x4_trans at a 32-bit shared address.
__device__ __forceinline__ void fa2_ldsm_t(unsigned* r, unsigned a) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		: "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

// fa2_load_kv issues the async copies of the keys and values of the 64
// positions from j0 of KV head kvh into the stage at shared address st (key
// tile, then value tile; rows of HD+8 elements); this thread copies the
// 16-byte chunk cc of rows cr, cr+RPP, … of each. Rows at or past kvEnd are
// zero-filled (their probabilities are 0, and a zero value keeps 0·v
// finite). Every row address is computed before the first copy, so a paged
// pool's table reads overlap.
template <int HD, class KV>
__device__ __forceinline__ void fa2_load_kv(unsigned st, const bf16_t* kc, const bf16_t* vc, const KV& kv, int kvh, int j0, int kvEnd) {
	constexpr int RB = (HD + 8) * 2, TILE = FA2_BN * RB, CPR = HD / 8, RPP = FA2_NT / CPR, NP = FA2_BN / RPP;
	const int cr = threadIdx.x / CPR, cc = (threadIdx.x % CPR) * 8;
	const unsigned d = st + cr * RB + cc * 2;
	usize off[NP];
#pragma unroll
	for (int i = 0; i < NP; i++) {
		const int p = j0 + cr + i * RPP;
		off[i] = p < kvEnd ? kv.row(p) + (usize)kvh * HD + cc : 0;
	}
#pragma unroll
	for (int i = 0; i < NP; i++) {
		const bool ok = j0 + cr + i * RPP < kvEnd;
		fa2_cp16(d + i * RPP * RB, kc + off[i], ok);
		fa2_cp16(d + TILE + i * RPP * RB, vc + off[i], ok);
	}
}

// prefill_fa2_body computes query tile qtile (rows qtile·128.. of q and out,
// T rows in all, at positions pos..pos+T−1) of head h over KV head kvh,
// as prefill_body. q and out point at the sequence's first row; rows are
// H·HD apart and 16-byte aligned. QREG keeps the query fragments in
// registers. Dynamic shared memory: the query tile, then two stages of a
// key and a value tile, rows of HD+8 elements (PREFILL_FA2_SMEM).
template <int HD, bool QREG, class KV>
__device__ __forceinline__ void prefill_fa2_body(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int T, int H,
		int h, int kvh, int qtile, int pos, float scale_log2, int window, const KV& kv) {
	constexpr int BM = FA2_BM, BN = FA2_BN, NT = FA2_NT, MT = 2, LD = HD + 8;
	constexpr int RB = LD * 2;                  // bytes per shared row
	constexpr int TILE = BN * RB;               // bytes of a key or value tile
	constexpr int KS = HD / 16;                 // k-steps of S over the head dimension
	constexpr int NB = BN / 8;                  // 8-key column blocks of S
	constexpr int ND = HD / 8;                  // 8-wide column blocks of O
	constexpr int CPR = HD / 8, RPP = NT / CPR;  // 16-byte chunks per row; rows per copy pass
	constexpr int SK = KS * NB / 2;             // ldmatrix steps of S (one key fragment each)
	constexpr int SV = (NB / 2) * (ND / 2);     // ldmatrix steps of P·V (one value fragment each)
	extern __shared__ __attribute__((aligned(16))) bf16_t prefill_fa2_sm[];
	const unsigned sQ = smem_u32(prefill_fa2_sm), sKV = sQ + BM * RB;
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int g = lane >> 2, tg = lane & 3;
	const int b0 = qtile * BM;           // the block's first row
	const int t0 = b0 + warp * 16 * MT;  // this warp's first row
	const usize qs = (usize)H * HD;      // elements between tokens of q and out
	// This lane's ldmatrix row addresses (the fragment layouts of mma_bf16):
	// queries (A: rows +0..15, columns +0/+8), keys (B of S: keys +0..7 and
	// +8..15 of two column blocks, dims +0/+8), values (B of P·V, transposed:
	// keys +0..15, dims +0/+8 of two column blocks).
	const unsigned qA = sQ + (warp * 16 * MT + (lane & 7) + ((lane >> 3) & 1) * 8) * RB + (lane >> 4) * 16;
	const unsigned kB = ((lane & 7) + (lane >> 4) * 8) * RB + ((lane >> 3) & 1) * 16;
	const unsigned vB = TILE + ((lane & 7) + ((lane >> 3) & 1) * 8) * RB + (lane >> 4) * 16;

	const int lastRow = min(T, b0 + BM) - 1;
	const int kvEnd = pos + lastRow + 1;
	const int ntiles = (kvEnd + BN - 1) / BN;
	const int jfirst = window > 0 ? max(0, pos + b0 - window + 1) / BN : 0;
	const int wq0 = pos + t0, wq1 = wq0 + 16 * MT - 1;  // the warp's query positions
	const bool live = t0 < T;
	const int qp0 = pos + t0 + g;                   // position of row g of the warp's first m16 tile
	const int wm = window > 0 ? window - 1 : 1 << 30;  // a key at kp is visible to qp when qp−wm ≤ kp ≤ qp

	{  // the query tile (its own group), rows past T zero
		const int cr = tid / CPR, cc = (tid % CPR) * 8;
		const bf16_t* qh = q + (usize)h * HD + cc;
#pragma unroll
		for (int i = 0; i < BM / RPP; i++) {
			const int r = cr + i * RPP;
			const bool ok = b0 + r < T;
			fa2_cp16(sQ + r * RB + cc * 2, ok ? qh + (usize)(b0 + r) * qs : q, ok);
		}
	}
	cp_async_commit();
	fa2_load_kv<HD>(sKV, kc, vc, kv, kvh, jfirst * BN, kvEnd);
	cp_async_commit();

	unsigned qf[QREG ? MT : 1][QREG ? KS : 1][4];
	if (QREG) {
		cp_async_wait1();  // this thread's query copies are done
		__syncthreads();   // everyone's are
#pragma unroll
		for (int mt = 0; mt < MT; mt++)
#pragma unroll
			for (int kk = 0; kk < (QREG ? KS : 1); kk++) fa2_ldsm(qf[mt][kk], qA + mt * 16 * RB + kk * 32);
	}
	float o[MT][ND][4];
	float m[MT][2], l[MT][2];  // running maxima (scaled) and this thread's share of the row sums
#pragma unroll
	for (int mt = 0; mt < MT; mt++) {
#pragma unroll
		for (int nd = 0; nd < ND; nd++) o[mt][nd][0] = o[mt][nd][1] = o[mt][nd][2] = o[mt][nd][3] = 0.f;
		m[mt][0] = m[mt][1] = -FT_INF;
		l[mt][0] = l[mt][1] = 0.f;
	}

	for (int j = jfirst; j < ntiles; j++) {
		const unsigned st = sKV + ((j - jfirst) & 1) * (2 * TILE);
		cp_async_wait0();  // this thread's copies of tile j (and the queries) are done
		__syncthreads();   // everyone's are, and every warp is done with tile j−1's stage
		if (j + 1 < ntiles) fa2_load_kv<HD>(sKV + ((j + 1 - jfirst) & 1) * (2 * TILE), kc, vc, kv, kvh, (j + 1) * BN, kvEnd);
		cp_async_commit();
		const int j0 = j * BN;
		// Warp-uniform: does any of the warp's queries see a key of the tile,
		// and does any key need a mask?
		if (!live || j0 > wq1 || (window > 0 && j0 + BN - 1 < wq0 - window + 1)) continue;
		const bool edge = j0 + BN - 1 > wq0 || (window > 0 && j0 < wq1 - window + 1);

		// S = Q·Kᵀ, the key (and query) fragments of step i+1 loaded
		// before the mma of step i.
		float s[MT][NB][4];
#pragma unroll
		for (int mt = 0; mt < MT; mt++)
#pragma unroll
			for (int nb = 0; nb < NB; nb++) s[mt][nb][0] = s[mt][nb][1] = s[mt][nb][2] = s[mt][nb][3] = 0.f;
		{
			const unsigned kb = st + kB;
			unsigned bk[2][4], aq[2][MT][4];
			fa2_ldsm(bk[0], kb);
			if (!QREG) {
#pragma unroll
				for (int mt = 0; mt < MT; mt++) fa2_ldsm(aq[0][mt], qA + mt * 16 * RB);
			}
#pragma unroll
			for (int i = 0; i < SK; i++) {
				const int kk = i / (NB / 2), np = i % (NB / 2);
				if (i + 1 < SK) {
					const int nk = (i + 1) / (NB / 2), nn = (i + 1) % (NB / 2);
					fa2_ldsm(bk[(i + 1) & 1], kb + nn * 16 * RB + nk * 32);
					if (!QREG && nn == 0) {
#pragma unroll
						for (int mt = 0; mt < MT; mt++) fa2_ldsm(aq[nk & 1][mt], qA + mt * 16 * RB + nk * 32);
					}
				}
#pragma unroll
				for (int mt = 0; mt < MT; mt++) {
					const unsigned* a = QREG ? qf[mt][QREG ? kk : 0] : aq[kk & 1][mt];
					mma_bf16(s[mt][2 * np], a, bk[i & 1][0], bk[i & 1][1]);
					mma_bf16(s[mt][2 * np + 1], a, bk[i & 1][2], bk[i & 1][3]);
				}
			}
		}
		if (edge) {
#pragma unroll
			for (int mt = 0; mt < MT; mt++) {
#pragma unroll
				for (int nb = 0; nb < NB; nb++) {
					const int kp = j0 + nb * 8 + 2 * tg;
					const int qa = qp0 + 16 * mt, qb = qa + 8;
					if (kp > qa || kp < qa - wm) s[mt][nb][0] = -FT_INF;
					if (kp + 1 > qa || kp + 1 < qa - wm) s[mt][nb][1] = -FT_INF;
					if (kp > qb || kp < qb - wm) s[mt][nb][2] = -FT_INF;
					if (kp + 1 > qb || kp + 1 < qb - wm) s[mt][nb][3] = -FT_INF;
				}
			}
		}
		// Online softmax in base 2; P packed to the A fragments of P·V.
		unsigned pf[NB / 2][MT][4];
#pragma unroll
		for (int mt = 0; mt < MT; mt++) {
			float mx0 = -FT_INF, mx1 = -FT_INF;
#pragma unroll
			for (int nb = 0; nb < NB; nb++) {
				mx0 = fmaxf(mx0, fmaxf(s[mt][nb][0], s[mt][nb][1]));
				mx1 = fmaxf(mx1, fmaxf(s[mt][nb][2], s[mt][nb][3]));
			}
			mx0 = fmaxf(mx0, __shfl_xor_sync(FT_FULL, mx0, 1));
			mx0 = fmaxf(mx0, __shfl_xor_sync(FT_FULL, mx0, 2));
			mx1 = fmaxf(mx1, __shfl_xor_sync(FT_FULL, mx1, 1));
			mx1 = fmaxf(mx1, __shfl_xor_sync(FT_FULL, mx1, 2));
			const float mn0 = fmaxf(m[mt][0], mx0 * scale_log2), mn1 = fmaxf(m[mt][1], mx1 * scale_log2);
			// A row that has seen no visible key yet (a window, or an m16
			// tile above the diagonal of an edge tile) stays at zero, not NaN.
			const float ms0 = mn0 == -FT_INF ? 0.f : mn0, ms1 = mn1 == -FT_INF ? 0.f : mn1;
			const float a0 = prefill_ex2(m[mt][0] - ms0), a1 = prefill_ex2(m[mt][1] - ms1);
			m[mt][0] = mn0;
			m[mt][1] = mn1;
			float rs0 = 0.f, rs1 = 0.f;
#pragma unroll
			for (int nb = 0; nb < NB; nb++) {
				const float p0 = prefill_ex2(fmaf(s[mt][nb][0], scale_log2, -ms0));
				const float p1 = prefill_ex2(fmaf(s[mt][nb][1], scale_log2, -ms0));
				const float p2 = prefill_ex2(fmaf(s[mt][nb][2], scale_log2, -ms1));
				const float p3 = prefill_ex2(fmaf(s[mt][nb][3], scale_log2, -ms1));
				rs0 += p0 + p1;
				rs1 += p2 + p3;
				pf[nb / 2][mt][(nb & 1) * 2 + 0] = pack_bf16(p0, p1);
				pf[nb / 2][mt][(nb & 1) * 2 + 1] = pack_bf16(p2, p3);
			}
			l[mt][0] = l[mt][0] * a0 + rs0;
			l[mt][1] = l[mt][1] * a1 + rs1;
#pragma unroll
			for (int nd = 0; nd < ND; nd++) {
				o[mt][nd][0] *= a0;
				o[mt][nd][1] *= a0;
				o[mt][nd][2] *= a1;
				o[mt][nd][3] *= a1;
			}
		}
		// O += P·V, the value fragment of step i+1 loaded before the mma of
		// step i.
		{
			const unsigned vb = st + vB;
			unsigned bv[2][4];
			fa2_ldsm_t(bv[0], vb);
#pragma unroll
			for (int i = 0; i < SV; i++) {
				const int kk = i / (ND / 2), ndp = i % (ND / 2);
				if (i + 1 < SV) {
					const int nk = (i + 1) / (ND / 2), nn = (i + 1) % (ND / 2);
					fa2_ldsm_t(bv[(i + 1) & 1], vb + nk * 16 * RB + nn * 32);
				}
#pragma unroll
				for (int mt = 0; mt < MT; mt++) {
					mma_bf16(o[mt][2 * ndp], pf[kk][mt], bv[i & 1][0], bv[i & 1][1]);
					mma_bf16(o[mt][2 * ndp + 1], pf[kk][mt], bv[i & 1][2], bv[i & 1][3]);
				}
			}
		}
	}
	cp_async_wait0();
	__syncwarp();  // every lane's last ldmatrix of the query rows is done
	// The normalised rows go to the warp's own query rows of shared memory
	// (no other warp reads them), then out in 16-byte stores.
#pragma unroll
	for (int mt = 0; mt < MT; mt++) {
		float l0 = l[mt][0], l1 = l[mt][1];
		l0 += __shfl_xor_sync(FT_FULL, l0, 1);
		l0 += __shfl_xor_sync(FT_FULL, l0, 2);
		l1 += __shfl_xor_sync(FT_FULL, l1, 1);
		l1 += __shfl_xor_sync(FT_FULL, l1, 2);
		const float i0 = l0 > 0.f ? 1.f / l0 : 0.f, i1 = l1 > 0.f ? 1.f / l1 : 0.f;
		const unsigned r0 = sQ + (warp * 16 * MT + mt * 16 + g) * RB + tg * 4;
#pragma unroll
		for (int nd = 0; nd < ND; nd++) {
			asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(r0 + nd * 16), "r"(pack_bf16(o[mt][nd][0] * i0, o[mt][nd][1] * i0))
				: "memory");
			asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(r0 + 8 * RB + nd * 16), "r"(pack_bf16(o[mt][nd][2] * i1, o[mt][nd][3] * i1))
				: "memory");
		}
	}
	__syncwarp();
#pragma unroll
	for (int i = 0; i < 16 * MT * CPR / 32; i++) {
		const int c = i * 32 + lane, r = c / CPR, cc = (c % CPR) * 8;
		uint4 v;
		asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
			: "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(sQ + (warp * 16 * MT + r) * RB + cc * 2) : "memory");
		if (t0 + r < T) *(uint4*)(out + (usize)(t0 + r) * qs + (usize)h * HD + cc) = v;
	}
}

// PREFILL_FA2_SMEM is the dynamic shared memory of the fa2 kernels of head
// width HD: the 128-row query tile and two stages of a key and a value
// tile, rows of HD+8 elements (prefillVariant.smem on the Go side).
#define PREFILL_FA2_SMEM(HD) ((FA2_BM + 4 * FA2_BN) * ((HD) + 8) * 2)

// prefill_fa2_contig is prefill_vcontig_body for prefill_fa2_body.
template <int HD, bool QREG>
__device__ __forceinline__ void prefill_fa2_contig(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int T, int H,
		int K, const int* posp, int pos0, float scale_log2, int window) {
	const int h = blockIdx.x;
	const prefill_contig kv = {(usize)K * HD};
	prefill_fa2_body<HD, QREG>(out, q, kc, vc, T, H, h, h / (H / K), gridDim.y - 1 - blockIdx.y, ft_pos(posp, pos0), scale_log2,
		window, kv);
}

// prefill_fa2_varlen is prefill_vvarlen_body for prefill_fa2_body.
template <int HD, bool QREG>
__device__ __forceinline__ void prefill_fa2_varlen(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int H, int K,
		const int* tiles, const int* qStarts, const int* lens, const int* table, int maxBlocks, int bs, float scale_log2, int window) {
	const int h = blockIdx.x;
	const int seq = tiles[2 * blockIdx.y], qtile = tiles[2 * blockIdx.y + 1];
	const int q0 = qStarts[seq], T = qStarts[seq + 1] - q0;
	const usize qs = (usize)H * HD;
	const prefill_paged kv = {table + (usize)seq * maxBlocks, bs, (usize)K * HD};
	prefill_fa2_body<HD, QREG>(out + (usize)q0 * qs, q + (usize)q0 * qs, kc, vc, T, H, h, h / (H / K), qtile, lens[seq] - T,
		scale_log2, window, kv);
}

// attn_prefill_fa2_d128_bf16 is attn_prefill_d128_bf16 in the fa2 layout
// (above); grid (H, ceil(T/128)), 128 threads, PREFILL_FA2_SMEM(128) bytes;
// q, out and the cache rows 16-byte aligned.
extern "C" __global__ void __launch_bounds__(FA2_NT, 2) attn_prefill_fa2_d128_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_fa2_contig<128, false>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}

// attn_prefill_fa2_d64_bf16 is attn_prefill_fa2_d128_bf16 for head width 64
// (query fragments in registers), PREFILL_FA2_SMEM(64) bytes.
extern "C" __global__ void __launch_bounds__(FA2_NT, 2) attn_prefill_fa2_d64_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_fa2_contig<64, true>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}

// attn_varlen_prefill_fa2_d128_bf16 is attn_varlen_prefill_d128_bf16 in the
// fa2 layout: tiles of 128 rows, 128 threads, PREFILL_FA2_SMEM(128) bytes.
extern "C" __global__ void __launch_bounds__(FA2_NT, 2) attn_varlen_prefill_fa2_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_fa2_varlen<128, false>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}

// attn_varlen_prefill_fa2_d64_bf16 is attn_varlen_prefill_fa2_d128_bf16 for
// head width 64, PREFILL_FA2_SMEM(64) bytes.
extern "C" __global__ void __launch_bounds__(FA2_NT, 2) attn_varlen_prefill_fa2_d64_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_fa2_varlen<64, true>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
