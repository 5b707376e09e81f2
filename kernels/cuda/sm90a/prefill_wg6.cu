// Prefill attention on warpgroup MMA with ping-pong scheduling between the
// two warpgroups (variant wg6, FT_PREFILL_VARIANT=wg6; the default on
// compute capability 9.0). It follows prefill_wg.cu in SourceSM90a's
// module and uses its helpers. Same arguments and results as wg, the same
// sums in the same order but for the rescale (the last point below).
//
// prefill_wg.cu's layout (two warpgroups × 64 query rows, 128-position
// key/value tiles by cp.async into 128-byte swizzled shared memory, three
// stages, the same helpers and shared-memory layout, WG_SMEM) with the
// tensor cores taken in turns: while one warpgroup runs its softmax the
// other's wgmmas run (FlashAttention-3's inter-warpgroup ping-pong).
//
// A warpgroup's work on tile t is G(t), its wgmmas: S_t = Q·K_tᵀ and the
// P·V of its previous visible tile (deferred so that both products of a
// turn go to the tensor cores together), waited for at once; then X(t),
// the masking and online softmax of S_t into the P fragments of the next
// turn. Warpgroup 1 runs half a tile behind warpgroup 0. Per block tile j
// (copies waited for, one block barrier: B(j)) warpgroup 0 does B(j),
// G(j) (issuing tile j+1's copies between issuing its wgmmas and waiting
// for them), X(j); warpgroup 1 does G(j−1), B(j), X(j−1), and after the
// last block tile G and X of the last. So warpgroup 0's G(j) runs during
// warpgroup 1's X(j−1), and warpgroup 1's G(j) during warpgroup 0's X(j);
// the block barrier B(j+1) waits for warpgroup 1's G(j) to be done. Two
// named barriers of 256 threads order the turns: id 1, warpgroup 0 may
// issue (warpgroup 1 arrives after issuing G(t), t not the last tile;
// warpgroup 0 waits before G(t), t not the first), id 2, warpgroup 1 may
// issue (warpgroup 0 arrives after issuing every G(t); warpgroup 1 waits
// before every G(t)). Id 0 is the block barrier (__syncthreads); the
// epilogue's per-warpgroup barriers are ids 3 and 4.
//
// Why this cannot deadlock (there are no spin loops, only hardware
// barriers, so the argument is by counting):
//  1. Every barrier operation is warpgroup-uniform or block-uniform: the
//     loop bounds jfirst and ntiles depend on the block's query tile only,
//     and the branches around the barriers (wg, t, visible(t), pending) are
//     the same for the 128 threads of a warpgroup, so each barrier is
//     reached by whole warpgroups (bar.sync/bar.arrive count threads in
//     whole warps).
//  2. Both warpgroups run G(t) for every t in [jfirst, ntiles), whether or
//     not they see tile t (a warpgroup with no rows left, a tile before its
//     window or past its diagonal issues nothing but still arrives), so per
//     block: id 2 gets ntiles−jfirst arrivals from warpgroup 0 and as many
//     waits from warpgroup 1; id 1 gets ntiles−1−jfirst arrivals from
//     warpgroup 1 (t < ntiles−1) and as many waits from warpgroup 0
//     (t > jfirst). No arrival is left over at exit and no wait is unmatched.
//  3. No generation of a named barrier can be completed by one side alone
//     (two arrivals of warpgroup 0 on id 2 would make 256): between two
//     arrivals of a warpgroup on a barrier lies the other's matching wait.
//     Id 2: warpgroup 0 arrives in step j, before B(j+1); warpgroup 1 waits
//     in step j+1 before B(j+1), and warpgroup 0's next arrival is after
//     B(j+1). Id 1: warpgroup 1 arrives in step j+1 (its G(j)) after its
//     wait on id 2 for warpgroup 0's G(j), whose arrival on id 2 comes
//     after warpgroup 0's wait on id 1 for warpgroup 1's arrival of step j.
//  4. No cycle of waits: in step j warpgroup 1's wait on id 2 needs
//     warpgroup 0's arrival in G(j−1), which warpgroup 0 made in step j−1
//     after B(j−1) and its own wait on id 1, itself matched by warpgroup
//     1's arrival in step j−1 before B(j−1); warpgroup 0's wait on id 1
//     after B(j) needs warpgroup 1's arrival in step j before B(j), made
//     already. Each wait depends only on work the other warpgroup does
//     before the last block barrier both have passed, or between it and
//     the next one without waiting back.
//
// Stages: the copies warpgroup 0 issues in G(j) overwrite the stage of
// tile j−2, whose last readers (the S and P·V products of tile j−2, issued
// in G(j−1) at the latest by either warpgroup) every thread has waited for
// before B(j). B(j+1) waits for those copies (cp.async.wait_group, then
// the proxy fence and the barrier).
//
// Fewer instructions a tile than the first form of this schedule (wg3,
// removed in the twentieth session after this one measured faster: its
// figures are in bench/RESULTS.md, s6a–s20e). Nsight Compute on wg3 at
// 8,192 positions (s20b) found the tensor pipe active 53% of the time and
// each warp issuing one instruction every 4.75 cycles, 781 instructions a
// warp and key tile: a tile lasted as long as one warp's instruction
// stream, not as long as its products. Of those 781, ~170 built wgmma
// descriptors in vector registers and moved them to uniform ones (R2UR),
// because the stage addresses derived from the warpgroup index tid/128,
// which the compiler cannot prove warp-uniform; ~140 computed the 16
// key/value copy addresses of the tile (64-bit row products, selects,
// predicates); 66 rescaled the output accumulators by a factor that is 1
// after the first tiles. Here (598 a warp and tile with the first three
// points below, s20d; the last two came after and were timed, not counted):
//  - the warpgroup index is broadcast from lane 0 (__shfl_sync), so the
//    stage, tile and descriptor arithmetic is warp-uniform and stays in
//    the uniform datapath; a descriptor is the constant upper word and a
//    lower word that steps by constants over the k-steps (wg_desc's
//    fields: the address field has 14 bits and shared addresses stay
//    under 2^18, so the steps never carry into the offset fields);
//  - contiguous caches (wg_contig) copy through a row pointer per thread
//    stepped by a constant, unpredicated on tiles that lie wholly before
//    kvEnd (the paged pool keeps wg_load_kv's form);
//  - the output accumulators and row sums are rescaled only when some row
//    of the warp has a new maximum (__any_sync): otherwise the factor is
//    2^0 = 1, which wg3 multiplied by as ex2.approx(0), and wg's still
//    does (on the H200 the outputs then differ from wg3's in a few of a
//    million elements, by one bf16 rounding: TestVarlenContigKernels,
//    s20c);
//  - warpgroup 0 alone copies each next key/value tile, after it has issued
//    its wgmmas of the step and before it waits for them (time it spends
//    waiting anyway), not all 256 threads at the block barrier, ahead of
//    warpgroup 0's wgmmas and warpgroup 1's softmax;
//  - the softmax's row maxima reduce as four chains joined, not one chain
//    (the same maxima: max is exact in any order).

// wg6_bar_sync and wg6_bar_arrive are bar.sync and bar.arrive of named
// barrier id with 256 threads (both warpgroups).
__device__ __forceinline__ void wg6_bar_sync(int id) { asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ void wg6_bar_arrive(int id) { asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory"); }

// wg6_flag<B> is a compile-time bool argument of a generic lambda.
template <bool B>
struct wg6_flag {
	static constexpr bool value = B;
};

// wg6_desc is wg_desc with the fixed upper word of every descriptor here
// (stride byte offset 1024, 128-byte swizzle) and lower word lo: the
// address >> 4 and the leading byte offset >> 4 at bit 16 (wg6_lo).
__device__ __forceinline__ unsigned long long wg6_desc(unsigned lo) {
	return ((unsigned long long)((1024u >> 4) | (1u << 30)) << 32) | lo;
}

// wg6_lo is the lower descriptor word of shared address addr with leading
// byte offset lbo.
__device__ __forceinline__ unsigned wg6_lo(unsigned addr, unsigned lbo) { return ((addr & 0x3FFFF) >> 4) | ((lbo >> 4) << 16); }

// wg6_cp16 copies 16 bytes from global src to shared address dst
// asynchronously (no zero fill: src is in bounds).
__device__ __forceinline__ void wg6_cp16(unsigned dst, const void* src) {
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

// wg6_load_kv is wg_load_kv done by the block's first NT threads (NT/(HD/8)
// a multiple of 8, so that rows cr + i·RPP keep row cr's swizzle): the
// generic form for any cache layout.
template <int HD, int BN, int NT, class KV>
__device__ __forceinline__ void wg6_load_kv(unsigned st, const bf16_t* kc, const bf16_t* vc, const KV& kv, int kvh, int j0, int kvEnd) {
	constexpr int CPR = HD / 8, RPP = NT / CPR, NP = BN / RPP, TILE = BN * HD * 2;
	static_assert(RPP % 8 == 0, "rows a pass keep the swizzle");
	const int cr = threadIdx.x / CPR, cc = threadIdx.x % CPR;
	usize off[NP];
#pragma unroll
	for (int i = 0; i < NP; i++) {
		const int p = j0 + cr + i * RPP;
		off[i] = p < kvEnd ? kv.row(p) + (usize)kvh * HD + cc * 8 : 0;
	}
	const unsigned d = st + wg_swz<BN>(cr, cc);
#pragma unroll
	for (int i = 0; i < NP; i++) {
		const bool ok = j0 + cr + i * RPP < kvEnd;
		wg_cp16(d + i * RPP * 128, kc + off[i], ok);
		wg_cp16(d + TILE + i * RPP * 128, vc + off[i], ok);
	}
}

// wg6_load_kv for a contiguous cache: the thread's rows j0 + cr + i·RPP
// are one pointer stepped by RPP rows; a tile wholly before kvEnd copies
// unpredicated, the last one zero-fills its rows at or past kvEnd.
template <int HD, int BN, int NT>
__device__ __forceinline__ void wg6_load_kv(unsigned st, const bf16_t* kc, const bf16_t* vc, const wg_contig& kv, int kvh, int j0,
		int kvEnd) {
	constexpr int CPR = HD / 8, RPP = NT / CPR, NP = BN / RPP, TILE = BN * HD * 2;
	static_assert(RPP % 8 == 0, "rows a pass keep the swizzle");
	const int cr = threadIdx.x / CPR, cc = threadIdx.x % CPR;
	const unsigned d = st + wg_swz<BN>(cr, cc);
	const usize off = (usize)(j0 + cr) * kv.rs + (usize)kvh * HD + cc * 8, step = (usize)RPP * kv.rs;
	const bf16_t* kp = kc + off;
	const bf16_t* vp = vc + off;
	if (j0 + BN <= kvEnd) {
#pragma unroll
		for (int i = 0; i < NP; i++) {
			wg6_cp16(d + i * RPP * 128, kp);
			wg6_cp16(d + TILE + i * RPP * 128, vp);
			kp += step;
			vp += step;
		}
	} else {
#pragma unroll
		for (int i = 0; i < NP; i++) {
			const bool ok = j0 + cr + i * RPP < kvEnd;
			wg_cp16(d + i * RPP * 128, ok ? kp : kc, ok);
			wg_cp16(d + TILE + i * RPP * 128, ok ? vp : vc, ok);
			kp += step;
			vp += step;
		}
	}
}

// prefill_wg6_body computes query tile qtile (rows qtile·128.. of q and
// out, T rows in all, at positions pos..pos+T−1) of head h over KV head
// kvh, as prefill_wg_body, with the ping-pong schedule (file comment).
template <int HD, int BN, int NS, class KV>
__device__ __forceinline__ void prefill_wg6_body(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int T, int H,
		int h, int kvh, int qtile, int pos, float scale_log2, int window, const KV& kv) {
	constexpr int BM = WG_BM;
	constexpr int QT = BM * HD * 2;              // bytes of the query tile
	constexpr int TILE = BN * HD * 2;            // bytes of a key or value tile
	constexpr int KS = HD / 16;                  // k-steps of S = Q·Kᵀ
	constexpr int PS = BN / 16;                  // k-steps of O += P·V
	constexpr int SN = BN / 2, ON = HD / 2;      // accumulators per thread of S and O
	static_assert(NS == 3, "three stages (the stage of tile j−1 is read after tile j+1's copies are issued)");
	extern __shared__ __attribute__((aligned(1024))) unsigned char prefill_wg6_sm[];
	const unsigned sQ = (smem_u32(prefill_wg6_sm) + 1023) & ~1023u, sKV = sQ + QT;
	const int tid = threadIdx.x, wtid = tid & 127, warp = wtid >> 5, lane = tid & 31;
	const int wg = __shfl_sync(FT_FULL, tid >> 7, 0);  // warp-uniform to the compiler (file comment)
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
	const unsigned qlo = wg6_lo(sQ + wg * (64 * 128), 16);        // the warpgroup's query rows, k-step 0

	wg_load_q<HD>(sQ, q, h, b0, T, qs, tid);  // the query tile (its own group)
	cp_async_commit();
	wg6_load_kv<HD, BN, WG_NT>(sKV, kc, vc, kv, kvh, jfirst * BN, kvEnd);
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
		return live && j0 <= wq1 && !(window > 0 && j0 + BN - 1 < wq0 - window + 1);
	};
	const auto stage = [&](int t) { return sKV + (unsigned)((t - jfirst) % NS) * (2 * TILE); };

	const auto arrive = [&](int t) {
		if (wg == 0) {
			wg6_bar_arrive(2);
		} else if (t < ntiles - 1) {
			wg6_bar_arrive(1);
		}
	};
	const auto pv = [&]() {
#pragma unroll
		for (int kk = 0; kk < PS; kk++) wg_rs<HD>(o, pf[kk], wg6_desc(vlo + kk * (2048 >> 4)));
	};
	// Warpgroup 0's copies of tile t+1 (file comment), issued while its
	// wgmmas of tile t run; warpgroup 1 copies nothing after the first tile.
	const auto copyNext = [&](int t) {
		if (wg == 0 && t + 1 < ntiles) {
			wg6_load_kv<HD, BN, 128>(stage(t + 1), kc, vc, kv, kvh, (t + 1) * BN, kvEnd);
			cp_async_commit();
		}
	};
	const auto turn = [&](int t, auto doS, auto doPV) {
		wg_pin<ON>(o);
		wg_fence();
		if constexpr (decltype(doS)::value) {
			const unsigned klo = wg6_lo(stage(t), 16);
#pragma unroll
			for (int kk = 0; kk < KS; kk++) {
				const unsigned qk = qlo + (((kk >> 2) * (BM * 128) + (kk & 3) * 32) >> 4);
				const unsigned kk_ = klo + (((kk >> 2) * (BN * 128) + (kk & 3) * 32) >> 4);
				wg_ss<BN>(s, wg6_desc(qk), wg6_desc(kk_), kk > 0);
			}
		}
		if constexpr (decltype(doPV)::value) pv();
		wg_commit();
		arrive(t);
		copyNext(t);
		wg_wait0();
		wg_pin<SN>(s);
		wg_pin<ON>(o);
	};
	const auto gemms = [&](int t) {
		if (wg == 0) {
			if (t > jfirst) wg6_bar_sync(1);
		} else {
			wg6_bar_sync(2);
		}
		const bool vis = visible(t);
		if (vis && pending) {
			turn(t, wg6_flag<true>(), wg6_flag<true>());
		} else if (vis) {
			turn(t, wg6_flag<true>(), wg6_flag<false>());
		} else if (pending) {
			turn(t, wg6_flag<false>(), wg6_flag<true>());
		} else {
			arrive(t);
			copyNext(t);
		}
		pending = false;
	};

	const auto softmax = [&](int t) {
		if (!visible(t)) return;
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
		// The rows' maxima as four chains each (depth BN/32), started from
		// the first pairs (a start at −∞ costs a max each: fmaxf(−∞, x) is
		// not x for a NaN x), then joined: few registers more than one chain
		// a row.
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
		// o and l are multiplied by 2^(m−ms): 1 when no maximum moved, and
		// 0 for a row that still sees no key (whose o and l are 0 already),
		// so the warp skips it unless some row's maximum moved.
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

	for (int j = jfirst; j <= ntiles; j++) {
		const int t = j - wg;
		const bool mine = t >= jfirst && t < ntiles;
		if (wg == 1 && mine) gemms(t);
		if (j < ntiles) {  // B(j): tile j's copies are done (warpgroup 0 issued them in step j−1)
			cp_async_wait0();
			asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
			__syncthreads();
		}
		if (wg == 0 && mine) gemms(t);
		if (mine) softmax(t);
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
	wg_store_out<HD>(o, l0, l1, sQ, wg, 3 + wg, warp, g, tg, wtid, w0, T, out, qs, h);
}

// prefill_wg6_fixed is the fixed-length kernels' body: grid (H,
// ceil(T/128)), the last query tile first, over a contiguous cache.
template <int HD>
__device__ __forceinline__ void prefill_wg6_fixed(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int T, int H, int K,
		const int* posp, int pos0, float scale_log2, int window) {
	const wg_contig kv = {(usize)K * HD};
	prefill_wg6_body<HD, 128, 3>(out, q, kc, vc, T, H, blockIdx.x, blockIdx.x / (H / K), gridDim.y - 1 - blockIdx.y,
		ft_pos(posp, pos0), scale_log2, window, kv);
}

// prefill_wg6_varlen_paged is the varlen kernels' body over the paged
// pool: grid (H, tiles), tile blockIdx.y of the (sequence, query tile)
// list.
template <int HD>
__device__ __forceinline__ void prefill_wg6_varlen_paged(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int H, int K,
		const int* tiles, const int* qStarts, const int* lens, const int* table, int maxBlocks, int bs, float scale_log2, int window) {
	const int h = blockIdx.x, seq = tiles[2 * blockIdx.y], qtile = tiles[2 * blockIdx.y + 1];
	const int q0 = qStarts[seq], T = qStarts[seq + 1] - q0;
	const usize qs = (usize)H * HD;
	const wg_paged kv = {table + (usize)seq * maxBlocks, bs, (usize)K * HD};
	prefill_wg6_body<HD, 128, 3>(out + (usize)q0 * qs, q + (usize)q0 * qs, kc, vc, T, H, h, h / (H / K), qtile, lens[seq] - T,
		scale_log2, window, kv);
}

// prefill_wg6_varlen_contig is the varlen kernel's body for packed
// sequences that all start at position 0 in this forward (nothing cached
// before): sequence seq's keys and values are its own packed rows
// qStarts[seq].. of k and v [T,K,HD] (k already rotated), read as a
// contiguous cache with no block table. Rows past the tile's last query
// are never read (the copies zero-fill at kvEnd, which is at most the
// sequence's end), so a tile does not see the next sequence's rows.
template <int HD>
__device__ __forceinline__ void prefill_wg6_varlen_contig(bf16_t* out, const bf16_t* q, const bf16_t* k, const bf16_t* v, int H, int K,
		const int* tiles, const int* qStarts, float scale_log2, int window) {
	const int h = blockIdx.x;
	const int seq = tiles[2 * blockIdx.y], qtile = tiles[2 * blockIdx.y + 1];
	const int q0 = qStarts[seq], T = qStarts[seq + 1] - q0;
	const usize qs = (usize)H * HD, ks = (usize)K * HD;
	const wg_contig kv = {ks};
	prefill_wg6_body<HD, 128, 3>(out + (usize)q0 * qs, q + (usize)q0 * qs, k + (usize)q0 * ks, v + (usize)q0 * ks, T, H, h, h / (H / K),
		qtile, 0, scale_log2, window, kv);
}

// The kernels of variant wg6, for head widths 128 and 64: 256 threads, one
// block an SM, WG_SMEM(HD, 128, 3) bytes:
//   attn_prefill_wg6_dHD_bf16: attn_prefill_wg_dHD_bf16 with the ping-pong
//     schedule (file comment), grid (H, ceil(T/128)), the last query tile
//     first;
//   attn_varlen_prefill_wg6_dHD_bf16: attn_varlen_prefill_wg_dHD_bf16's
//     tiles of 128 rows over the paged pool, grid (H, tiles);
//   attn_varlen_contig_prefill_wg6_dHD_bf16: the same over the packed keys
//     and values of sequences starting at position 0
//     (prefill_wg6_varlen_contig).

// attn_prefill_wg6_d128_bf16: listed above, head width 128.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_prefill_wg6_d128_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_wg6_fixed<128>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}
// attn_varlen_prefill_wg6_d128_bf16: listed above, head width 128.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_prefill_wg6_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_wg6_varlen_paged<128>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
// attn_varlen_contig_prefill_wg6_d128_bf16: listed above, head width 128.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_contig_prefill_wg6_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* k, const bf16_t* v, int H, int K, const int* tiles, const int* qStarts, float scale_log2, int window) {
	prefill_wg6_varlen_contig<128>(out, q, k, v, H, K, tiles, qStarts, scale_log2, window);
}
// attn_prefill_wg6_d64_bf16: listed above, head width 64.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_prefill_wg6_d64_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_wg6_fixed<64>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}
// attn_varlen_prefill_wg6_d64_bf16: listed above, head width 64.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_prefill_wg6_d64_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_wg6_varlen_paged<64>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
// attn_varlen_contig_prefill_wg6_d64_bf16: listed above, head width 64.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_contig_prefill_wg6_d64_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* k, const bf16_t* v, int H, int K, const int* tiles, const int* qStarts, float scale_log2, int window) {
	prefill_wg6_varlen_contig<64>(out, q, k, v, H, K, tiles, qStarts, scale_log2, window);
}
