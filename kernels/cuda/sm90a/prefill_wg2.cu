// Prefill attention on warpgroup MMA with intra-warpgroup overlap (variant
// wg2, FT_PREFILL_VARIANT=wg2): prefill_wg.cu's layout (two warpgroups × 64
// query rows, 128-position key/value tiles by cp.async into 128-byte
// swizzled shared memory, three stages, the same helpers and shared-memory
// layout, WG_SMEM) with the P·V of a tile run during the softmax of the
// next. Per visible tile j a warpgroup issues S_j = Q·K_jᵀ, then
// O += P_{j−1}·V_{j−1} (P of the previous tile, packed in registers), waits
// for S_j only (wgmma.wait_group 1), masks and exponentiates S_j in place
// while the tensor cores work on P_{j−1}·V_{j−1}, then waits for that
// product, rescales O by the change of the running maxima and packs S_j
// into the bf16 A fragments of P_j. The copies of tile j+1 are issued
// after those wgmmas, not before them. The last P·V follows the loop. The
// registers this costs are S_j's fp32 accumulators next to the P_{j−1}
// fragments and O the in-flight product holds (FlashAttention-3's
// intra-warpgroup overlap).
//
// A warpgroup's visible tiles are contiguous (causal, optionally windowed);
// all threads still meet at one barrier per block tile, so the stage of
// tile j−2, loaded again at tile j, has had its P·V waited for by every
// thread during tile j−1 (or at the tile that left the visible range).

// prefill_wg2_pv is O += P·V for one tile: pf the A fragments of the
// tile's probabilities, st its stage (the value tile TILE bytes in).
template <int HD, int BN>
__device__ __forceinline__ void prefill_wg2_pv(float* o, const unsigned (*pf)[4], unsigned st) {
	constexpr int TILE = BN * HD * 2, PS = BN / 16;
#pragma unroll
	for (int kk = 0; kk < PS; kk++) wg_rs<HD>(o, pf[kk], wg_desc(st + TILE + kk * 2048, BN * 128, 1024));
}

// prefill_wg2_body is prefill_wg_body (same arguments and results) with
// the overlapped loop (file comment).
template <int HD, int BN, int NS, class KV>
__device__ __forceinline__ void prefill_wg2_body(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int T, int H,
		int h, int kvh, int qtile, int pos, float scale_log2, int window, const KV& kv) {
	constexpr int BM = WG_BM, NT = WG_NT;
	constexpr int CPR = HD / 8, RPP = NT / CPR;  // 16-byte chunks per row; rows per copy pass
	constexpr int QT = BM * HD * 2;              // bytes of the query tile
	constexpr int TILE = BN * HD * 2;            // bytes of a key or value tile
	constexpr int KS = HD / 16;                  // k-steps of S = Q·Kᵀ
	constexpr int PS = BN / 16;                  // k-steps of O += P·V
	constexpr int SN = BN / 2, ON = HD / 2;      // accumulators per thread of S and O
	static_assert(NS == 3, "three stages (the stage of tile j−1 is read while tile j+1 loads)");
	extern __shared__ __attribute__((aligned(1024))) unsigned char prefill_wg2_sm[];
	const unsigned sQ = (smem_u32(prefill_wg2_sm) + 1023) & ~1023u, sKV = sQ + QT;
	const int tid = threadIdx.x, wg = tid >> 7, wtid = tid & 127, warp = wtid >> 5, lane = tid & 31;
	const int g = lane >> 2, tg = lane & 3;
	const int b0 = qtile * BM;       // the block's first row
	const int w0 = b0 + wg * 64;     // the warpgroup's first row
	const usize qs = (usize)H * HD;  // elements between tokens of q and out

	const int lastRow = min(T, b0 + BM) - 1;
	const int kvEnd = pos + lastRow + 1;
	const int ntiles = (kvEnd + BN - 1) / BN;
	const int jfirst = window > 0 ? max(0, pos + b0 - window + 1) / BN : 0;
	const bool live = w0 < T;
	const int wq0 = pos + w0, wq1 = pos + min(T, w0 + 64) - 1;  // the warpgroup's query positions
	const int qa = pos + w0 + warp * 16 + g;                     // position of this thread's first row (the second is +8)
	const int wm = window > 0 ? window - 1 : 1 << 30;            // a key at kp is visible to qp when qp−wm ≤ kp ≤ qp

	{  // the query tile (its own group), rows past T zero
		const int cr = tid / CPR, cc = tid % CPR;
		const bf16_t* qh = q + (usize)h * HD + cc * 8;
		const unsigned d = sQ + wg_swz<BM>(cr, cc);
#pragma unroll
		for (int i = 0; i < BM / RPP; i++) {
			const int r = cr + i * RPP;
			const bool ok = b0 + r < T;
			wg_cp16(d + i * RPP * 128, ok ? qh + (usize)(b0 + r) * qs : q, ok);
		}
	}
	cp_async_commit();
	wg_load_kv<HD, BN>(sKV, kc, vc, kv, kvh, jfirst * BN, kvEnd);
	cp_async_commit();

	float o[ON];
#pragma unroll
	for (int i = 0; i < ON; i++) o[i] = 0.f;
	float m0 = -FT_INF, m1 = -FT_INF, l0 = 0.f, l1 = 0.f;  // running maxima (scaled) and row sums
	// P of the previous visible tile (A fragments of its P·V). Defined
	// before the loop: ptxas serialises every wgmma of a function where a
	// wgmma's register operand may be undefined on entry to its loop.
	unsigned pf[PS][4];
#pragma unroll
	for (int i = 0; i < PS; i++) pf[i][0] = pf[i][1] = pf[i][2] = pf[i][3] = 0;
	bool pending = false;                                   // that P·V is yet to be issued
	unsigned pst = 0;                                       // its stage

	for (int j = jfirst; j < ntiles; j++) {
		const unsigned st = sKV + ((j - jfirst) % NS) * (2 * TILE);
		cp_async_wait0();  // this thread's copies of tile j (and the queries) are done
		asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // visible to wgmma (the async proxy)
		__syncthreads();  // everyone's are, and every P·V of the stage of tile j+1−NS is done
		// The copies of tile j+1 into that stage: issued after this tile's
		// wgmmas where there are any, so that the tensor cores start first.
		const auto loadNext = [&]() {
			if (j + 1 < ntiles) wg_load_kv<HD, BN>(sKV + ((j + 1 - jfirst) % NS) * (2 * TILE), kc, vc, kv, kvh, (j + 1) * BN, kvEnd);
			cp_async_commit();
		};
		const int j0 = j * BN;
		// Warpgroup-uniform: does any of its queries see a key of the tile,
		// and does any key need a mask?
		if (!live || j0 > wq1 || (window > 0 && j0 + BN - 1 < wq0 - window + 1)) {
			loadNext();
			if (pending) {  // the visible range ended: the last P·V, before its stage is loaded again
				wg_pin<ON>(o);
				wg_fence();
				prefill_wg2_pv<HD, BN>(o, pf, pst);
				wg_commit();
				wg_wait0();
				wg_pin<ON>(o);
				pending = false;
			}
			continue;
		}
		const bool edge = j0 + BN - 1 > wq0 || (window > 0 && j0 < wq1 - window + 1);

		// S_j = Q·K_jᵀ (as prefill_wg.cu), then the previous tile's P·V.
		float s[SN];
		wg_pin<ON>(o);
		wg_fence();
#pragma unroll
		for (int kk = 0; kk < KS; kk++) {
			const unsigned qaddr = sQ + (kk >> 2) * (BM * 128) + wg * (64 * 128) + (kk & 3) * 32;
			const unsigned kaddr = st + (kk >> 2) * (BN * 128) + (kk & 3) * 32;
			wg_ss<BN>(s, wg_desc(qaddr, 16, 1024), wg_desc(kaddr, 16, 1024), kk > 0);
		}
		wg_commit();
		if (pending) {
			prefill_wg2_pv<HD, BN>(o, pf, pst);
			wg_commit();
			loadNext();
			asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");  // S_j; P·V runs on
		} else {
			loadNext();
			wg_wait0();
		}
		// S_j into p: the copies (volatile) stay after the wait, and s is
		// only read while the P·V is in flight.
		float p[SN];
#pragma unroll
		for (int i = 0; i < SN; i++) asm volatile("mov.b32 %0, %1;\n" : "=f"(p[i]) : "f"(s[i]));

		// p[4i+e]: row qa (e < 2) or qa+8 (e ≥ 2), key j0 + 8i + 2tg + (e & 1).
		if (edge) {
#pragma unroll
			for (int i = 0; i < BN / 8; i++) {
				const int kp = j0 + i * 8 + 2 * tg, qb = qa + 8;
				if (kp > qa || kp < qa - wm) p[4 * i + 0] = -FT_INF;
				if (kp + 1 > qa || kp + 1 < qa - wm) p[4 * i + 1] = -FT_INF;
				if (kp > qb || kp < qb - wm) p[4 * i + 2] = -FT_INF;
				if (kp + 1 > qb || kp + 1 < qb - wm) p[4 * i + 3] = -FT_INF;
			}
		}
		// Online softmax in base 2, the probabilities in place of p.
		float mx0 = -FT_INF, mx1 = -FT_INF;
#pragma unroll
		for (int i = 0; i < BN / 8; i++) {
			mx0 = fmaxf(mx0, fmaxf(p[4 * i + 0], p[4 * i + 1]));
			mx1 = fmaxf(mx1, fmaxf(p[4 * i + 2], p[4 * i + 3]));
		}
		mx0 = fmaxf(mx0, __shfl_xor_sync(FT_FULL, mx0, 1));
		mx0 = fmaxf(mx0, __shfl_xor_sync(FT_FULL, mx0, 2));
		mx1 = fmaxf(mx1, __shfl_xor_sync(FT_FULL, mx1, 1));
		mx1 = fmaxf(mx1, __shfl_xor_sync(FT_FULL, mx1, 2));
		const float mn0 = fmaxf(m0, mx0 * scale_log2), mn1 = fmaxf(m1, mx1 * scale_log2);
		// A row that has seen no visible key yet stays at zero, not NaN.
		const float ms0 = mn0 == -FT_INF ? 0.f : mn0, ms1 = mn1 == -FT_INF ? 0.f : mn1;
		const float a0 = wg_ex2(m0 - ms0), a1 = wg_ex2(m1 - ms1);
		m0 = mn0;
		m1 = mn1;
		float rs0 = 0.f, rs1 = 0.f;
#pragma unroll
		for (int i = 0; i < BN / 8; i++) {
			p[4 * i + 0] = wg_ex2(fmaf(p[4 * i + 0], scale_log2, -ms0));
			p[4 * i + 1] = wg_ex2(fmaf(p[4 * i + 1], scale_log2, -ms0));
			p[4 * i + 2] = wg_ex2(fmaf(p[4 * i + 2], scale_log2, -ms1));
			p[4 * i + 3] = wg_ex2(fmaf(p[4 * i + 3], scale_log2, -ms1));
			rs0 += p[4 * i + 0] + p[4 * i + 1];
			rs1 += p[4 * i + 2] + p[4 * i + 3];
		}
		// Whole-row sums now, not at the end: the shuffles keep ptxas
		// from sinking the exponentials below the wait for the P·V (it
		// does not move a wgmma wait across a shuffle), and l0, l1 are
		// then the rows' sums, the same in the quad.
		rs0 += __shfl_xor_sync(FT_FULL, rs0, 1);
		rs0 += __shfl_xor_sync(FT_FULL, rs0, 2);
		rs1 += __shfl_xor_sync(FT_FULL, rs1, 1);
		rs1 += __shfl_xor_sync(FT_FULL, rs1, 2);
		l0 = l0 * a0 + rs0;
		l1 = l1 * a1 + rs1;

		// The previous P·V is done: O takes the new maxima, P_j replaces it.
		wg_wait0();
		wg_pin<ON>(o);
#pragma unroll
		for (int i = 0; i < HD / 8; i++) {
			o[4 * i + 0] *= a0;
			o[4 * i + 1] *= a0;
			o[4 * i + 2] *= a1;
			o[4 * i + 3] *= a1;
		}
#pragma unroll
		for (int i = 0; i < BN / 8; i++) {  // A fragment of k-step kk: keys 16kk.. (S column blocks 2kk, 2kk+1)
			pf[i >> 1][(i & 1) * 2 + 0] = pack_bf16(p[4 * i + 0], p[4 * i + 1]);
			pf[i >> 1][(i & 1) * 2 + 1] = pack_bf16(p[4 * i + 2], p[4 * i + 3]);
		}
		pending = true;
		pst = st;
	}
	if (pending) {  // the last P·V
		wg_pin<ON>(o);
		wg_fence();
		prefill_wg2_pv<HD, BN>(o, pf, pst);
		wg_commit();
		wg_wait0();
		wg_pin<ON>(o);
	}
	cp_async_wait0();
	// The normalised rows go to the warpgroup's own query rows of shared
	// memory (its last wgmma that read them is done; the other warpgroup
	// never reads them), then out in 16-byte stores.
	const float i0 = l0 > 0.f ? 1.f / l0 : 0.f, i1 = l1 > 0.f ? 1.f / l1 : 0.f;
	const int ra = wg * 64 + warp * 16 + g;  // this thread's first row in the tile
#pragma unroll
	for (int i = 0; i < HD / 8; i++) {
		asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sQ + wg_swz<BM>(ra, i) + tg * 4), "r"(pack_bf16(o[4 * i] * i0, o[4 * i + 1] * i0))
			: "memory");
		asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sQ + wg_swz<BM>(ra + 8, i) + tg * 4),
			"r"(pack_bf16(o[4 * i + 2] * i1, o[4 * i + 3] * i1))
			: "memory");
	}
	asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");  // the warpgroup's rows are all written
#pragma unroll
	for (int i = 0; i < 64 * CPR / 128; i++) {
		const int c = i * 128 + wtid, r = c / CPR, cc = c % CPR;
		uint4 v;
		asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
			: "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(sQ + wg_swz<BM>(wg * 64 + r, cc)) : "memory");
		if (w0 + r < T) *(uint4*)(out + (usize)(w0 + r) * qs + (usize)h * HD + cc * 8) = v;
	}
}

// attn_prefill_wg2_d128_bf16 is attn_prefill_wg_d128_bf16 with the
// overlapped loop (file comment): grid (H, ceil(T/128)), the last query
// tile first, 256 threads, WG_SMEM(128, 128, 3) bytes.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_prefill_wg2_d128_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	const wg_contig kv = {(usize)K * 128};
	prefill_wg2_body<128, 128, 3>(out, q, kc, vc, T, H, blockIdx.x, blockIdx.x / (H / K), gridDim.y - 1 - blockIdx.y, ft_pos(posp, pos0),
		scale_log2, window, kv);
}

// attn_prefill_wg2_d64_bf16 is attn_prefill_wg2_d128_bf16 for head width
// 64, WG_SMEM(64, 128, 3) bytes.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_prefill_wg2_d64_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	const wg_contig kv = {(usize)K * 64};
	prefill_wg2_body<64, 128, 3>(out, q, kc, vc, T, H, blockIdx.x, blockIdx.x / (H / K), gridDim.y - 1 - blockIdx.y, ft_pos(posp, pos0),
		scale_log2, window, kv);
}

// prefill_wg2_varlen is prefill_wg_varlen with the overlapped loop.
template <int HD>
__device__ __forceinline__ void prefill_wg2_varlen(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int H, int K,
		const int* tiles, const int* qStarts, const int* lens, const int* table, int maxBlocks, int bs, float scale_log2, int window) {
	const int h = blockIdx.x;
	const int seq = tiles[2 * blockIdx.y], qtile = tiles[2 * blockIdx.y + 1];
	const int q0 = qStarts[seq], T = qStarts[seq + 1] - q0;
	const usize qs = (usize)H * HD;
	const wg_paged kv = {table + (usize)seq * maxBlocks, bs, (usize)K * HD};
	prefill_wg2_body<HD, 128, 3>(out + (usize)q0 * qs, q + (usize)q0 * qs, kc, vc, T, H, h, h / (H / K), qtile, lens[seq] - T,
		scale_log2, window, kv);
}

// attn_varlen_prefill_wg2_d128_bf16 is attn_varlen_prefill_wg_d128_bf16
// with the overlapped loop: tiles of 128 rows, 256 threads,
// WG_SMEM(128, 128, 3) bytes.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_prefill_wg2_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_wg2_varlen<128>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}

// attn_varlen_prefill_wg2_d64_bf16 is attn_varlen_prefill_wg2_d128_bf16
// for head width 64, WG_SMEM(64, 128, 3) bytes.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_prefill_wg2_d64_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_wg2_varlen<64>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
