// Variant wg1 (FT_PREFILL_VARIANT=wg1): prefill attention with one
// warpgroup a block, 64 query rows against 64-position key/value tiles,
// two blocks an SM. An experiment for short sequences (issue 15's 64
// prompts of 512 tokens), where wg6's blocks (128 rows, one an SM, two
// warpgroups in turns) have 1–4 key tiles each: a block's start (its first
// copies, the second warpgroup half a tile behind) and end (the last
// softmax and P·V of one warpgroup alone, the output stores) leave the SM's
// tensor cores idle, and with one block an SM nothing fills them. Here two
// independent blocks share an SM, so one's start, end and softmax run
// beside the other's products; and 64-row query tiles against 64-position
// key tiles compute 36 tiles for the 32 a 512-token causal square needs
// where 128 × 128 tiles compute 10 for 8.
//
// Per key tile t (one block barrier, B(t)): tile t's copies are waited for;
// the copies of tile t+1 are issued into the stage of tile t−2 (three
// stages: every thread waited for that tile's P·V before B(t)); then S_t =
// Q·K_tᵀ and the deferred P·V of the previous visible tile go to the
// tensor cores together and are waited for, and the masked online softmax
// of S_t makes the P fragments of the next. The helpers, descriptors,
// swizzled layout and softmax are wg6's (prefill_wg6.cu) at these sizes;
// shared memory: 1 KiB of slack, the 16 KiB query tile, three stages of a
// key and a value tile (16 KiB each at head width 128): 113 KiB, two
// blocks an SM.

#define W1_BM 64   // query rows per block
#define W1_NT 128  // threads per block (one warpgroup)
#define W1_BN 64   // key positions per tile
#define W1_NS 3    // key/value stages

// w1_load_q starts the cp.async copies of the block's 64-row query tile
// (rows b0.. of q, head h, rows qs elements apart) into shared memory at
// sQ in wg_swz<64> order, rows past T zero; the caller commits the group.
template <int HD>
__device__ __forceinline__ void w1_load_q(unsigned sQ, const bf16_t* q, int h, int b0, int T, usize qs) {
	constexpr int CPR = HD / 8, RPP = W1_NT / CPR;
	const int cr = threadIdx.x / CPR, cc = threadIdx.x % CPR;
	const bf16_t* qh = q + (usize)h * HD + cc * 8;
#pragma unroll
	for (int i = 0; i < W1_BM / RPP; i++) {
		const int r = cr + i * RPP;
		const bool ok = b0 + r < T;
		wg_cp16(sQ + wg_swz<W1_BM>(r, cc), ok ? qh + (usize)(b0 + r) * qs : q, ok);
	}
}

// prefill_w1_body computes query tile qtile (rows qtile·64.. of q and out,
// T rows in all, at positions pos..pos+T−1) of head h over KV head kvh with
// one warpgroup (file comment); arguments as prefill_wg6_body's.
template <int HD, bool OV, class KV>
__device__ __forceinline__ void prefill_w1_body(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int T, int H, int h,
		int kvh, int qtile, int pos, float scale_log2, int window, const KV& kv) {
	constexpr int BM = W1_BM, BN = W1_BN, NS = W1_NS;
	constexpr int QT = BM * HD * 2;          // bytes of the query tile
	constexpr int TILE = BN * HD * 2;        // bytes of a key or value tile
	constexpr int KS = HD / 16;              // k-steps of S = Q·Kᵀ
	constexpr int PS = BN / 16;              // k-steps of O += P·V
	constexpr int SN = BN / 2, ON = HD / 2;  // accumulators per thread of S and O
	extern __shared__ __attribute__((aligned(1024))) unsigned char prefill_w1_sm[];
	const unsigned sQ = (smem_u32(prefill_w1_sm) + 1023) & ~1023u, sKV = sQ + QT;
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int g = lane >> 2, tg = lane & 3;
	const int b0 = qtile * BM;       // the block's first row
	const usize qs = (usize)H * HD;  // elements between tokens of q and out

	const int lastRow = min(T, b0 + BM) - 1;
	const int kvEnd = pos + lastRow + 1;
	const int ntiles = (kvEnd + BN - 1) / BN;
	const int jfirst = window > 0 ? max(0, pos + b0 - window + 1) / BN : 0;
	const int wq0 = pos + b0, wq1 = pos + lastRow;        // the block's query positions
	const int qa = pos + b0 + warp * 16 + g;              // position of this thread's first row (the second is +8)
	const int wm = window > 0 ? window - 1 : 1 << 30;     // a key at kp is visible to qp when qp−wm ≤ kp ≤ qp
	const unsigned qlo = wg6_lo(sQ, 16);                  // the query rows, k-step 0

	w1_load_q<HD>(sQ, q, h, b0, T, qs);
	cp_async_commit();
	const auto stage = [&](int t) { return sKV + (unsigned)((t - jfirst) % NS) * (2 * TILE); };
	wg6_load_kv<HD, BN, W1_NT>(stage(jfirst), kc, vc, kv, kvh, jfirst * BN, kvEnd);
	cp_async_commit();

	float o[ON];
#pragma unroll
	for (int i = 0; i < ON; i++) o[i] = 0.f;
	float m0 = -FT_INF, m1 = -FT_INF, l0 = 0.f, l1 = 0.f;  // running maxima (scaled) and this thread's share of the row sums
	float s[SN];
#pragma unroll
	for (int i = 0; i < SN; i++) s[i] = 0.f;
	unsigned pf[PS][4];
#pragma unroll
	for (int i = 0; i < PS; i++) pf[i][0] = pf[i][1] = pf[i][2] = pf[i][3] = 0;
	bool pending = false;  // the P·V of the previous visible tile is yet to be issued
	unsigned vlo = 0;      // its value tile's lower descriptor word

	const auto visible = [&](int t) {
		const int j0 = t * BN;
		return j0 <= wq1 && !(window > 0 && j0 + BN - 1 < wq0 - window + 1);
	};
	const auto pv = [&]() {
#pragma unroll
		for (int kk = 0; kk < PS; kk++) wg_rs<HD>(o, pf[kk], wg6_desc(vlo + kk * (2048 >> 4)));
	};
	// softmax is wg6's (prefill_wg6_body) over this block's rows, of the
	// scores s of tile t.
	const auto softmax = [&](float(&s)[SN], int t) {
		const int j0 = t * BN;
		const bool edge = j0 + BN - 1 > wq0 || (window > 0 && j0 < wq1 - window + 1);
		if (edge) {
#pragma unroll
			for (int i = 0; i < BN / 8; i++) {
				const int kp = j0 + i * 8 + 2 * tg, qb = qa + 8;
				if (kp > qa || kp < qa - wm) s[4 * i + 0] = -FT_INF;
				if (kp + 1 > qa || kp + 1 < qa - wm) s[4 * i + 1] = -FT_INF;
				if (kp > qb || kp < qb - wm) s[4 * i + 2] = -FT_INF;
				if (kp + 1 > qb || kp + 1 < qb - wm) s[4 * i + 3] = -FT_INF;
			}
		}
		float t0[4], t1[4];
#pragma unroll
		for (int c = 0; c < 4; c++) {
			t0[c] = fmaxf(s[4 * c + 0], s[4 * c + 1]);
			t1[c] = fmaxf(s[4 * c + 2], s[4 * c + 3]);
		}
#pragma unroll
		for (int i = 4; i < BN / 8; i++) {
			t0[i & 3] = fmaxf(t0[i & 3], fmaxf(s[4 * i + 0], s[4 * i + 1]));
			t1[i & 3] = fmaxf(t1[i & 3], fmaxf(s[4 * i + 2], s[4 * i + 3]));
		}
		float mx0 = fmaxf(fmaxf(t0[0], t0[1]), fmaxf(t0[2], t0[3])), mx1 = fmaxf(fmaxf(t1[0], t1[1]), fmaxf(t1[2], t1[3]));
		mx0 = fmaxf(mx0, __shfl_xor_sync(FT_FULL, mx0, 1));
		mx0 = fmaxf(mx0, __shfl_xor_sync(FT_FULL, mx0, 2));
		mx1 = fmaxf(mx1, __shfl_xor_sync(FT_FULL, mx1, 1));
		mx1 = fmaxf(mx1, __shfl_xor_sync(FT_FULL, mx1, 2));
		const float mn0 = fmaxf(m0, mx0 * scale_log2), mn1 = fmaxf(m1, mx1 * scale_log2);
		const float ms0 = mn0 == -FT_INF ? 0.f : mn0, ms1 = mn1 == -FT_INF ? 0.f : mn1;
		const bool moved = __any_sync(FT_FULL, mn0 != m0 || mn1 != m1);
		float a0 = 1.f, a1 = 1.f;
		if (moved) {
			a0 = wg_ex2(m0 - ms0);
			a1 = wg_ex2(m1 - ms1);
		}
		m0 = mn0;
		m1 = mn1;
		float rs0 = 0.f, rs1 = 0.f;
#pragma unroll
		for (int i = 0; i < BN / 8; i++) {
			const float p0 = wg_ex2(fmaf(s[4 * i + 0], scale_log2, -ms0));
			const float p1 = wg_ex2(fmaf(s[4 * i + 1], scale_log2, -ms0));
			const float p2 = wg_ex2(fmaf(s[4 * i + 2], scale_log2, -ms1));
			const float p3 = wg_ex2(fmaf(s[4 * i + 3], scale_log2, -ms1));
			rs0 += p0 + p1;
			rs1 += p2 + p3;
			pf[i >> 1][(i & 1) * 2 + 0] = pack_bf16(p0, p1);
			pf[i >> 1][(i & 1) * 2 + 1] = pack_bf16(p2, p3);
		}
		if (moved) {
			l0 = l0 * a0 + rs0;
			l1 = l1 * a1 + rs1;
#pragma unroll
			for (int i = 0; i < HD / 8; i++) {
				o[4 * i + 0] *= a0;
				o[4 * i + 1] *= a0;
				o[4 * i + 2] *= a1;
				o[4 * i + 3] *= a1;
			}
		} else {
			l0 += rs0;
			l1 += rs1;
		}
		pending = true;
		vlo = wg6_lo(stage(t) + TILE, BN * 128);
	};

	// B(t): tile t's copies (the only ones outstanding) are done, and every
	// thread has waited for the products of the step before, so the stage
	// of tile t−2 (= t+1's) is free.
	const auto barrier = [&]() {
		cp_async_wait0();
		asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
		__syncthreads();
	};
	const auto copy = [&](int t) {
		if (t < ntiles) {
			wg6_load_kv<HD, BN, W1_NT>(stage(t), kc, vc, kv, kvh, t * BN, kvEnd);
			cp_async_commit();
		}
	};
	const auto issueS = [&](float(&sx)[SN], int t) {
		const unsigned klo = wg6_lo(stage(t), 16);
#pragma unroll
		for (int kk = 0; kk < KS; kk++) {
			const unsigned qk = qlo + (((kk >> 2) * (BM * 128) + (kk & 3) * 32) >> 4);
			const unsigned kk_ = klo + (((kk >> 2) * (BN * 128) + (kk & 3) * 32) >> 4);
			wg_ss<BN>(sx, wg6_desc(qk), wg6_desc(kk_), kk > 0);
		}
	};
	if constexpr (!OV) {
		for (int t = jfirst; t < ntiles; t++) {
			barrier();
			copy(t + 1);
			const bool vis = visible(t);
			if (!vis && !pending) continue;
			wg_pin<ON>(o);
			wg_fence();
			if (vis) issueS(s, t);
			if (pending) pv();
			wg_commit();
			wg_wait0();
			wg_pin<SN>(s);
			wg_pin<ON>(o);
			pending = false;
			if (vis) softmax(s, t);
		}
	} else {
		// wg1o: S of tile t+1 goes to the tensor cores before the softmax of
		// tile t and runs beside it (FlashAttention-3's overlap within a
		// warpgroup), into the other of two score buffers; then the P·V of
		// tile t, and both are waited for. Every tile from jfirst to the
		// last is visible to some row of the block (one warpgroup: the
		// window's first tile is jfirst, the diagonal's the last).
		float s2[SN];
		barrier();
		copy(jfirst + 1);
		wg_fence();
		issueS(s, jfirst);
		wg_commit();
		wg_wait0();
		wg_pin<SN>(s);
		const auto step = [&](float(&sc)[SN], float(&sn)[SN], int t) {
			const bool more = t + 1 < ntiles;
			if (more) {
				barrier();
				copy(t + 2);
				wg_fence();
				issueS(sn, t + 1);
				wg_commit();
			}
			softmax(sc, t);
			wg_pin<ON>(o);
			wg_fence();
			pv();
			wg_commit();
			wg_wait0();
			wg_pin<SN>(sn);
			wg_pin<ON>(o);
			pending = false;
		};
		for (int t = jfirst; t < ntiles; t += 2) {
			step(s, s2, t);
			if (t + 1 < ntiles) step(s2, s, t + 1);
		}
	}
	if (pending) {  // the last P·V
		wg_pin<ON>(o);
		wg_fence();
		pv();
		wg_commit();
		wg_wait0();
		wg_pin<ON>(o);
	}
	cp_async_wait0();
	wg_store_out<HD, BM>(o, l0, l1, sQ, 0, 1, warp, g, tg, tid, b0, T, out, qs, h);
}

// prefill_w1_fixed: grid (H, ceil(T/64)), the last query tile first, over
// a contiguous cache.
template <int HD, bool OV>
__device__ __forceinline__ void prefill_w1_fixed(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int T, int H, int K,
		const int* posp, int pos0, float scale_log2, int window) {
	const wg_contig kv = {(usize)K * HD};
	prefill_w1_body<HD, OV>(out, q, kc, vc, T, H, blockIdx.x, blockIdx.x / (H / K), gridDim.y - 1 - blockIdx.y, ft_pos(posp, pos0),
		scale_log2, window, kv);
}

// prefill_w1_varlen_paged: grid (H, tiles) over the paged pool, tile
// blockIdx.y of the (sequence, query tile) list.
template <int HD, bool OV>
__device__ __forceinline__ void prefill_w1_varlen_paged(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int H, int K,
		const int* tiles, const int* qStarts, const int* lens, const int* table, int maxBlocks, int bs, float scale_log2, int window) {
	const int h = blockIdx.x, seq = tiles[2 * blockIdx.y], qtile = tiles[2 * blockIdx.y + 1];
	const int q0 = qStarts[seq], T = qStarts[seq + 1] - q0;
	const usize qs = (usize)H * HD;
	const wg_paged kv = {table + (usize)seq * maxBlocks, bs, (usize)K * HD};
	prefill_w1_body<HD, OV>(out + (usize)q0 * qs, q + (usize)q0 * qs, kc, vc, T, H, h, h / (H / K), qtile, lens[seq] - T, scale_log2,
		window, kv);
}

// prefill_w1_varlen_contig: grid (H, tiles) over the packed keys and values
// of sequences starting at position 0 (prefill_wg6_varlen_contig's layout).
template <int HD, bool OV>
__device__ __forceinline__ void prefill_w1_varlen_contig(bf16_t* out, const bf16_t* q, const bf16_t* k, const bf16_t* v, int H, int K,
		const int* tiles, const int* qStarts, float scale_log2, int window) {
	const int h = blockIdx.x;
	const int seq = tiles[2 * blockIdx.y], qtile = tiles[2 * blockIdx.y + 1];
	const int q0 = qStarts[seq], T = qStarts[seq + 1] - q0;
	const usize qs = (usize)H * HD, ks = (usize)K * HD;
	const wg_contig kv = {ks};
	prefill_w1_body<HD, OV>(out + (usize)q0 * qs, q + (usize)q0 * qs, k + (usize)q0 * ks, v + (usize)q0 * ks, T, H, h, h / (H / K), qtile,
		0, scale_log2, window, kv);
}

// The kernels of wg1 (OV false) and wg1o (OV true), head width 128: 128
// threads, two blocks an SM, 1 KiB + 16 KiB + 3 × 32 KiB of dynamic shared
// memory; the same arguments as wg6's: attn_prefill_* over a contiguous
// cache, grid (H, ceil(T/64)); attn_varlen_prefill_* over the paged pool
// and attn_varlen_contig_prefill_* over packed fresh sequences, grid (H,
// tiles).

// attn_prefill_wg1_d128_bf16: contiguous cache.
extern "C" __global__ void __launch_bounds__(W1_NT, 2) attn_prefill_wg1_d128_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_w1_fixed<128, false>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}
// attn_varlen_prefill_wg1_d128_bf16: the paged pool.
extern "C" __global__ void __launch_bounds__(W1_NT, 2) attn_varlen_prefill_wg1_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_w1_varlen_paged<128, false>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
// attn_varlen_contig_prefill_wg1_d128_bf16: packed fresh sequences.
extern "C" __global__ void __launch_bounds__(W1_NT, 2) attn_varlen_contig_prefill_wg1_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* k, const bf16_t* v, int H, int K, const int* tiles, const int* qStarts, float scale_log2, int window) {
	prefill_w1_varlen_contig<128, false>(out, q, k, v, H, K, tiles, qStarts, scale_log2, window);
}

// attn_prefill_wg1o_d128_bf16: contiguous cache.
extern "C" __global__ void __launch_bounds__(W1_NT, 2) attn_prefill_wg1o_d128_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_w1_fixed<128, true>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}
// attn_varlen_prefill_wg1o_d128_bf16: the paged pool.
extern "C" __global__ void __launch_bounds__(W1_NT, 2) attn_varlen_prefill_wg1o_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_w1_varlen_paged<128, true>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
// attn_varlen_contig_prefill_wg1o_d128_bf16: packed fresh sequences.
extern "C" __global__ void __launch_bounds__(W1_NT, 2) attn_varlen_contig_prefill_wg1o_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* k, const bf16_t* v, int H, int K, const int* tiles, const int* qStarts, float scale_log2, int window) {
	prefill_w1_varlen_contig<128, true>(out, q, k, v, H, K, tiles, qStarts, scale_log2, window);
}
