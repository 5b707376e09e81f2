// Variant wg9 (FT_PREFILL_VARIANT=wg9): wg6's kernels (sm90a/prefill_wg6.cu)
// with FlashAttention-3's warp specialization. Nsight Compute on wg6 at
// 8,192 positions (s21b): warpgroup 0's copies 15% of its samples, a block
// barrier a key tile holding both warpgroups in step, the softmax latency
// exposed with two warps a scheduler. Here a block has three warpgroups
// (384 threads, WG9_NT):
//  - warpgroup 0, the producer, gives its registers away (setmaxnreg down
//    to 24, 40 over the paged pool) and copies the key and value tiles with cp.async into NS
//    stages, each tile's completion signalled on its stage's "full"
//    mbarrier (cp.async.mbarrier.arrive.noinc: 128 arrivals, one a thread,
//    each when the thread's copies land); before overwriting a stage it
//    waits on the stage's "empty" mbarrier;
//  - warpgroups 1 and 2, the consumers (setmaxnreg up to 240, or 232), own 64 query
//    rows each, copy them once, and run wg6's turn per key tile: wait for
//    the tile's keys (and the previous visible tile's values), take the
//    tensor cores in turn (named barriers 1 and 2, FlashAttention-3's
//    ping-pong: a consumer waits on its own barrier, issues S = Q·Kᵀ of the
//    tile and the deferred P·V of its previous visible tile, then lets the
//    other go by arriving on the other's), wait for the products, release
//    the stages they read (one arrival a warp on the "empty" barriers: 8),
//    and run the softmax while the other consumer's products run.
// No block barrier after the set-up: the consumers meet only at the turn
// barriers, the producer only at the mbarriers. The same sums in the same
// order as wg6 (outputs equal bit for bit).
//
// Why it cannot deadlock:
//  - turns: both consumers run a turn for every tile t in [jfirst, ntiles)
//    (with nothing to issue on a tile they do not see), so each waits N =
//    ntiles − jfirst times on its own barrier. Consumer 0 goes first:
//    consumer 1 arrives once on barrier 1 before its loop and after each
//    of its turns but the last (N arrivals in all); consumer 0 arrives on
//    barrier 2 after each of its N turns. Every wait is matched, no
//    arrival is left over, and no generation of a barrier can complete
//    from one side alone (between two arrivals of a consumer lies its own
//    wait, which needs the other's arrival).
//  - stages: the producer fills tile t after both consumers released tile
//    t − NS, which each does at its turn t − NS + 1 at the latest (keys at
//    turn t − NS, values with the deferred P·V); a consumer at turn t waits
//    only for tiles ≤ t, which need releases of tiles ≤ t − NS, all made
//    before turn t − 1 of either consumer.
//  - phases: a consumer releases a stage for tile t only after it waited
//    for the stage's "full" barrier of tile t (even for a tile it does not
//    see), so its arrival cannot count towards the stage's previous phase
//    (the producer filled tile t only after that phase completed).

#define WG9_NT 384  // threads per block: the producer and two consumer warpgroups

// wg9_mbar_init initialises the mbarrier at shared address bar for count
// arrivals a phase.
__device__ __forceinline__ void wg9_mbar_init(unsigned bar, unsigned count) {
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// wg9_mbar_wait waits until the phase of parity ph of the mbarrier at bar
// has completed (parity 1 on a new barrier: at once).
__device__ __forceinline__ void wg9_mbar_wait(unsigned bar, unsigned ph) {
	unsigned done;
	do {
		asm volatile(
			"{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
			: "=r"(done)
			: "r"(bar), "r"(ph)
			: "memory");
	} while (!done);
}

// wg9_mbar_arrive is one arrival (release) on the mbarrier at bar.
__device__ __forceinline__ void wg9_mbar_arrive(unsigned bar) {
	asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}

// wg9_cp_arrive makes the mbarrier at bar receive this thread's arrival
// once all of its earlier cp.async copies have landed (the count set at
// initialisation includes it).
__device__ __forceinline__ void wg9_cp_arrive(unsigned bar) {
	asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// wg9_tmap is a CUtensorMap (runtime/cuda/tmap.go); wg9_maps the key and
// value maps a TMA kernel takes as its last, __grid_constant__ parameter.
struct __align__(64) wg9_tmap {
	unsigned long long w[16];
};
struct wg9_maps {
	wg9_tmap k, v;
};

// wg9_expect is the producer's arrival on the mbarrier at bar announcing
// bytes of TMA copies that complete the phase.
__device__ __forceinline__ void wg9_expect(unsigned bar, unsigned bytes) {
	asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar), "r"(bytes) : "memory");
}

// wg9_tma copies the box of map at column x, row y into shared memory at
// dst (1024-byte aligned: the 128-byte swizzle), its bytes completing on
// the mbarrier at bar.
__device__ __forceinline__ void wg9_tma(unsigned dst, const wg9_tmap* map, int x, int y, unsigned bar) {
	asm volatile(
		"cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
		"l"(map), "r"(x), "r"(y), "r"(bar)
		: "memory");
}

// wg_wait1 waits until at most one wgmma group of the warpgroup is pending.
__device__ __forceinline__ void wg_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }

// wg9_pin_pf keeps the A fragments of an in-flight P·V alive (an empty asm
// that "writes" them), so that the compiler does not reuse their registers
// before the wait that follows the P·V.
template <int PS>
__device__ __forceinline__ void wg9_pin_pf(unsigned (&pf)[PS][4]) {
#pragma unroll
	for (int i = 0; i < PS; i++) asm volatile("" : "+r"(pf[i][0]), "+r"(pf[i][1]), "+r"(pf[i][2]), "+r"(pf[i][3])::"memory");
}

// wg9_load copies the BN rows from j0 of KV head kvh of one cache (keys or
// values) into the tile at shared address st: the producer's thread ptid
// (of NTH) copies rows cr + i·RPP, chunk cc; rows at or past kvEnd are
// zero-filled. The generic form for any cache layout.
template <int HD, int BN, int NTH, class KV>
__device__ __forceinline__ void wg9_load(unsigned st, const bf16_t* c, const KV& kv, int kvh, int j0, int kvEnd, int ptid) {
	constexpr int CPR = HD / 8, RPP = NTH / CPR, NP = BN / RPP;
	static_assert(RPP % 8 == 0, "rows a pass keep the swizzle");
	const int cr = ptid / CPR, cc = ptid % CPR;
	const unsigned d = st + wg_swz<BN>(cr, cc);
#pragma unroll
	for (int i = 0; i < NP; i++) {
		const int p = j0 + cr + i * RPP;
		const bool ok = p < kvEnd;
		wg_cp16(d + i * RPP * 128, ok ? c + kv.row(p) + (usize)kvh * HD + cc * 8 : c, ok);
	}
}

// wg9_load for a contiguous cache: one pointer stepped by RPP rows,
// unpredicated on a tile wholly before kvEnd.
template <int HD, int BN, int NTH>
__device__ __forceinline__ void wg9_load(unsigned st, const bf16_t* c, const wg_contig& kv, int kvh, int j0, int kvEnd, int ptid) {
	constexpr int CPR = HD / 8, RPP = NTH / CPR, NP = BN / RPP;
	static_assert(RPP % 8 == 0, "rows a pass keep the swizzle");
	const int cr = ptid / CPR, cc = ptid % CPR;
	const unsigned d = st + wg_swz<BN>(cr, cc);
	const usize step = (usize)RPP * kv.rs;
	const bf16_t* p = c + (usize)(j0 + cr) * kv.rs + (usize)kvh * HD + cc * 8;
	if (j0 + BN <= kvEnd) {
#pragma unroll
		for (int i = 0; i < NP; i++) {
			wg6_cp16(d + i * RPP * 128, p);
			p += step;
		}
	} else {
#pragma unroll
		for (int i = 0; i < NP; i++) {
			const bool ok = j0 + cr + i * RPP < kvEnd;
			wg_cp16(d + i * RPP * 128, ok ? p : c, ok);
			p += step;
		}
	}
}

// wg9_load_q copies a consumer's 64 query rows (rows w0.. of q, slot cw of
// the 128-row tile at sQ; rows past T zero) with its 128 threads.
template <int HD>
__device__ __forceinline__ void wg9_load_q(unsigned sQ, const bf16_t* q, int h, int w0, int cw, int T, usize qs, int wtid) {
	constexpr int CPR = HD / 8, RPP = 128 / CPR;
	const int cr = wtid / CPR, cc = wtid % CPR;
	const bf16_t* qh = q + (usize)h * HD + cc * 8;
#pragma unroll
	for (int i = 0; i < 64 / RPP; i++) {
		const int r = cr + i * RPP;
		const bool ok = w0 + r < T;
		wg_cp16(sQ + wg_swz<WG_BM>(cw * 64 + r, cc), ok ? qh + (usize)(w0 + r) * qs : q, ok);
	}
}

// prefill_wg9_body computes query tile qtile as prefill_wg6_body does,
// with the producer and consumer warpgroups of the file comment; after the
// set-up the producer keeps PR registers a thread and the consumers take
// CR (PR·128 + CR·256 = 64,512, the 168 a thread of 384 threads the block
// starts with). Over a contiguous cache the producer needs few (24/240);
// the paged pool's row lookups need more (40/232: 24 spilled, s22a).
// PP false (wg9f) drops the turns: each consumer issues its products when
// ready and the tensor cores take them in the order they come.
// With maps (wg9t) one producer thread copies each key and value tile in
// HD/64 TMA boxes of BN rows × 64 columns (the 128-byte swizzled halves
// of the tile), rows row0 + position of the maps (rows past a map's end
// read as zeros; rows past kvEnd but inside it are later positions of the
// same sequence or the next sequence's, finite, masked, and multiplied by
// probabilities of exactly 0), and the consumers need no proxy fence (TMA
// writes through the async proxy). Else the producer warpgroup copies with
// cp.async and the consumers fence the proxies after each wait.
template <int HD, int BN, int NS, int PR, int CR, bool OV, bool PP, class KV>
__device__ __forceinline__ void prefill_wg9_body(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int T, int H,
		int h, int kvh, int qtile, int pos, float scale_log2, int window, const KV& kv, const wg9_maps* maps = nullptr, int row0 = 0) {
	constexpr int BM = WG_BM;
	constexpr int QT = BM * HD * 2;          // bytes of the query tile
	constexpr int TILE = BN * HD * 2;        // bytes of a key or value tile
	constexpr int KS = HD / 16;              // k-steps of S = Q·Kᵀ
	constexpr int PS = BN / 16;              // k-steps of O += P·V
	constexpr int SN = BN / 2, ON = HD / 2;  // accumulators per thread of S and O
	extern __shared__ __attribute__((aligned(1024))) unsigned char prefill_wg9_sm[];
	__shared__ unsigned long long wg9_bars[4 * NS];  // per stage: keys full, values full, keys empty, values empty
	const unsigned sQ = (smem_u32(prefill_wg9_sm) + 1023) & ~1023u, sKV = sQ + QT;
	const unsigned bars = smem_u32(wg9_bars);
	const auto kFull = [&](int s) { return bars + 8u * s; };
	const auto vFull = [&](int s) { return bars + 8u * (NS + s); };
	const auto kEmpty = [&](int s) { return bars + 8u * (2 * NS + s); };
	const auto vEmpty = [&](int s) { return bars + 8u * (3 * NS + s); };
	const int tid = threadIdx.x;
	const int wg = __shfl_sync(FT_FULL, tid >> 7, 0);  // warp-uniform to the compiler
	const int b0 = qtile * BM;
	const int lastRow = min(T, b0 + BM) - 1;
	const int kvEnd = pos + lastRow + 1;
	const int ntiles = (kvEnd + BN - 1) / BN;
	const int jfirst = window > 0 ? max(0, pos + b0 - window + 1) / BN : 0;
	const auto stage = [&](int t) { return (t - jfirst) % NS; };
	const auto phase = [&](int t) { return (unsigned)((t - jfirst) / NS) & 1u; };

	if (tid == 0) {
#pragma unroll
		for (int s = 0; s < NS; s++) {
			wg9_mbar_init(kFull(s), maps ? 1 : 128);
			wg9_mbar_init(vFull(s), maps ? 1 : 128);
			wg9_mbar_init(kEmpty(s), 8);
			wg9_mbar_init(vEmpty(s), 8);
		}
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
	}
	__syncthreads();

	if (wg == 0) {  // the producer
		static_assert(PR * 128 + CR * 256 == 64512 && PR % 8 == 0 && CR % 8 == 0, "registers: the block's 168 a thread, in eights");
		asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PR) : "memory");
		if (maps) {
			if (tid != 0) return;
			for (int t = jfirst; t < ntiles; t++) {
				const int s = stage(t);
				const unsigned st = sKV + (unsigned)s * (2 * TILE), ph = phase(t);
				wg9_mbar_wait(kEmpty(s), ph ^ 1u);
				wg9_expect(kFull(s), TILE);
#pragma unroll
				for (int hh = 0; hh < HD / 64; hh++) wg9_tma(st + hh * (BN * 128), &maps->k, kvh * HD + hh * 64, row0 + t * BN, kFull(s));
				wg9_mbar_wait(vEmpty(s), ph ^ 1u);
				wg9_expect(vFull(s), TILE);
#pragma unroll
				for (int hh = 0; hh < HD / 64; hh++)
					wg9_tma(st + TILE + hh * (BN * 128), &maps->v, kvh * HD + hh * 64, row0 + t * BN, vFull(s));
			}
			return;
		}
		for (int t = jfirst; t < ntiles; t++) {
			const int s = stage(t);
			const unsigned st = sKV + (unsigned)s * (2 * TILE), ph = phase(t);
			wg9_mbar_wait(kEmpty(s), ph ^ 1u);
			wg9_load<HD, BN, 128>(st, kc, kv, kvh, t * BN, kvEnd, tid);
			wg9_cp_arrive(kFull(s));
			wg9_mbar_wait(vEmpty(s), ph ^ 1u);
			wg9_load<HD, BN, 128>(st + TILE, vc, kv, kvh, t * BN, kvEnd, tid);
			wg9_cp_arrive(vFull(s));
		}
		asm volatile("cp.async.wait_all;\n" ::: "memory");  // its copies land before it exits
		return;
	}
	asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CR) : "memory");

	const int cw = wg - 1, wtid = tid & 127, warp = wtid >> 5, lane = tid & 31;
	const int g = lane >> 2, tg = lane & 3;
	const int w0 = b0 + cw * 64;     // the consumer's first row
	const usize qs = (usize)H * HD;  // elements between tokens of q and out
	const bool live = w0 < T;
	const int wq0 = pos + w0, wq1 = pos + min(T, w0 + 64) - 1;  // the consumer's query positions
	const int qa = pos + w0 + warp * 16 + g;                     // position of this thread's first row (the second is +8)
	const int wm = window > 0 ? window - 1 : 1 << 30;            // a key at kp is visible to qp when qp−wm ≤ kp ≤ qp
	const unsigned qlo = wg6_lo(sQ + cw * (64 * 128), 16);        // the consumer's query rows, k-step 0

	wg9_load_q<HD>(sQ, q, h, w0, cw, T, qs, wtid);
	cp_async_commit();
	cp_async_wait0();
	asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
	asm volatile("bar.sync %0, 128;\n" ::"r"(3 + cw) : "memory");
	if (PP && cw == 1) wg6_bar_arrive(1);  // consumer 0 takes the first turn

	float o[ON];
#pragma unroll
	for (int i = 0; i < ON; i++) o[i] = 0.f;
	float m0 = -FT_INF, m1 = -FT_INF, l0 = 0.f, l1 = 0.f;
	float s[SN];
#pragma unroll
	for (int i = 0; i < SN; i++) s[i] = 0.f;
	unsigned pf[PS][4];
#pragma unroll
	for (int i = 0; i < PS; i++) pf[i][0] = pf[i][1] = pf[i][2] = pf[i][3] = 0;
	bool pending = false;  // the P·V of the previous visible tile tp is yet to be issued
	int tp = 0;

	const auto visible = [&](int t) {
		const int j0 = t * BN;
		return live && j0 <= wq1 && !(window > 0 && j0 + BN - 1 < wq0 - window + 1);
	};
	// release is one arrival a warp on the mbarrier at bar (the warp's
	// wgmmas that read the stage are done: wgmma.wait_group is warp-wide).
	const auto release = [&](unsigned bar) {
		if (lane == 0) wg9_mbar_arrive(bar);
	};
	const auto pv = [&]() {
		const unsigned vlo = wg6_lo(sKV + (unsigned)stage(tp) * (2 * TILE) + TILE, BN * 128);
#pragma unroll
		for (int kk = 0; kk < PS; kk++) wg_rs<HD>(o, pf[kk], wg6_desc(vlo + kk * (2048 >> 4)));
	};
	const auto issue = [&](int t, auto doS, auto doPV) {
		wg_pin<ON>(o);
		wg_fence();
		if constexpr (decltype(doS)::value) {
			const unsigned klo = wg6_lo(sKV + (unsigned)stage(t) * (2 * TILE), 16);
#pragma unroll
			for (int kk = 0; kk < KS; kk++) {
				const unsigned qk = qlo + (((kk >> 2) * (BM * 128) + (kk & 3) * 32) >> 4);
				const unsigned kk_ = klo + (((kk >> 2) * (BN * 128) + (kk & 3) * 32) >> 4);
				wg_ss<BN>(s, wg6_desc(qk), wg6_desc(kk_), kk > 0);
			}
		}
		if constexpr (decltype(doPV)::value) pv();
		wg_commit();
	};

	// The softmax of a tile in two parts: probs masks S, moves the maxima
	// and computes the probabilities (into pf, or with OV into s, as
	// floats: pf still feeds the P·V in flight) and their row sums; finish
	// rescales the row sums and output (with OV once that P·V is done) and
	// packs s into pf. Split or not, the same operations on the same
	// values in the same order.
	bool moved = false;
	float a0 = 1.f, a1 = 1.f, rs0 = 0.f, rs1 = 0.f;
	const auto probs = [&](int t) {
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
		moved = __any_sync(FT_FULL, mn0 != m0 || mn1 != m1);
		a0 = 1.f;
		a1 = 1.f;
		if (moved) {
			a0 = wg_ex2(m0 - ms0);
			a1 = wg_ex2(m1 - ms1);
		}
		m0 = mn0;
		m1 = mn1;
		rs0 = 0.f;
		rs1 = 0.f;
#pragma unroll
		for (int i = 0; i < BN / 8; i++) {
			const float p0 = wg_ex2(fmaf(s[4 * i + 0], scale_log2, -ms0));
			const float p1 = wg_ex2(fmaf(s[4 * i + 1], scale_log2, -ms0));
			const float p2 = wg_ex2(fmaf(s[4 * i + 2], scale_log2, -ms1));
			const float p3 = wg_ex2(fmaf(s[4 * i + 3], scale_log2, -ms1));
			rs0 += p0 + p1;
			rs1 += p2 + p3;
			if constexpr (OV) {
				s[4 * i + 0] = p0;
				s[4 * i + 1] = p1;
				s[4 * i + 2] = p2;
				s[4 * i + 3] = p3;
			} else {
				pf[i >> 1][(i & 1) * 2 + 0] = pack_bf16(p0, p1);
				pf[i >> 1][(i & 1) * 2 + 1] = pack_bf16(p2, p3);
			}
		}
	};
	const auto finish = [&]() {
		if constexpr (OV) {
#pragma unroll
			for (int i = 0; i < BN / 8; i++) {
				pf[i >> 1][(i & 1) * 2 + 0] = pack_bf16(s[4 * i + 0], s[4 * i + 1]);
				pf[i >> 1][(i & 1) * 2 + 1] = pack_bf16(s[4 * i + 2], s[4 * i + 3]);
			}
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
	};

	for (int t = jfirst; t < ntiles; t++) {
		const bool vis = visible(t);
		wg9_mbar_wait(kFull(stage(t)), phase(t));  // also for a tile it does not see (file comment: phases)
		if (pending) wg9_mbar_wait(vFull(stage(tp)), phase(tp));
		if (!vis) {  // its values are never read here: wait for them and release them now
			wg9_mbar_wait(vFull(stage(t)), phase(t));
			release(vEmpty(stage(t)));
		}
		if (!maps) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
		if (PP) wg6_bar_sync(1 + cw);  // this consumer's turn
		if (OV && vis && pending) {
			// S of this tile and P·V of the previous in two groups; the
			// softmax's probabilities while the P·V runs.
			issue(t, wg6_flag<true>(), wg6_flag<false>());
			pv();
			wg_commit();
			if (PP && (cw == 0 || t < ntiles - 1)) wg6_bar_arrive(2 - cw);
			wg_wait1();
			wg_pin<SN>(s);
			release(kEmpty(stage(t)));
			probs(t);
			wg_wait0();
			wg_pin<ON>(o);
			wg9_pin_pf<PS>(pf);
			release(vEmpty(stage(tp)));
			finish();
			tp = t;
			continue;
		}
		if (vis && pending) {
			issue(t, wg6_flag<true>(), wg6_flag<true>());
		} else if (vis) {
			issue(t, wg6_flag<true>(), wg6_flag<false>());
		} else if (pending) {
			issue(t, wg6_flag<false>(), wg6_flag<true>());
		}
		if (PP && (cw == 0 || t < ntiles - 1)) wg6_bar_arrive(2 - cw);  // the other's turn
		if (vis || pending) {
			wg_wait0();
			wg_pin<SN>(s);
			wg_pin<ON>(o);
		}
		release(kEmpty(stage(t)));
		if (pending) release(vEmpty(stage(tp)));
		pending = false;
		if (vis) {
			probs(t);
			finish();
			pending = true;
			tp = t;
		}
	}
	if (pending) {  // the last P·V
		wg9_mbar_wait(vFull(stage(tp)), phase(tp));
		if (!maps) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
		wg_pin<ON>(o);
		wg_fence();
		pv();
		wg_commit();
		wg_wait0();
		wg_pin<ON>(o);
		release(vEmpty(stage(tp)));
	}
	wg_store_out<HD>(o, l0, l1, sQ, cw, 3 + cw, warp, g, tg, wtid, w0, T, out, qs, h);
}

// The kernels of variant wg9, for head widths 128 and 64: WG9_NT threads,
// one block an SM, WG_SMEM(HD, 128, 3) bytes of dynamic shared memory
// (and 96 static for the mbarriers); grids and arguments as wg6's
// (prefill_wg6.cu: fixed-length with the last query tile first, varlen
// over the paged pool, varlen over packed contiguous rows).

// prefill_wg9_fixed: prefill_wg6_fixed with wg9's body (maps: wg9t's).
template <int HD, bool OV = false, bool PP = true>
__device__ __forceinline__ void prefill_wg9_fixed(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int T, int H, int K,
		const int* posp, int pos0, float scale_log2, int window, const wg9_maps* maps = nullptr) {
	const wg_contig kv = {(usize)K * HD};
	prefill_wg9_body<HD, 128, 3, 24, 240, OV, PP>(out, q, kc, vc, T, H, blockIdx.x, blockIdx.x / (H / K), gridDim.y - 1 - blockIdx.y,
		ft_pos(posp, pos0), scale_log2, window, kv, maps);
}

// prefill_wg9_varlen_paged: prefill_wg6_varlen_paged with wg9's body.
template <int HD, bool OV = false, bool PP = true>
__device__ __forceinline__ void prefill_wg9_varlen_paged(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int H, int K,
		const int* tiles, const int* qStarts, const int* lens, const int* table, int maxBlocks, int bs, float scale_log2, int window) {
	const int h = blockIdx.x, seq = tiles[2 * blockIdx.y], qtile = tiles[2 * blockIdx.y + 1];
	const int q0 = qStarts[seq], T = qStarts[seq + 1] - q0;
	const usize qs = (usize)H * HD;
	const wg_paged kv = {table + (usize)seq * maxBlocks, bs, (usize)K * HD};
	prefill_wg9_body<HD, 128, 3, 40, 232, OV, PP>(out + (usize)q0 * qs, q + (usize)q0 * qs, kc, vc, T, H, h, h / (H / K), qtile, lens[seq] - T,
		scale_log2, window, kv);
}

// prefill_wg9_varlen_contig: prefill_wg6_varlen_contig with wg9's body
// (maps: wg9t's, over the whole packed k and v).
template <int HD, bool OV = false, bool PP = true>
__device__ __forceinline__ void prefill_wg9_varlen_contig(bf16_t* out, const bf16_t* q, const bf16_t* k, const bf16_t* v, int H, int K,
		const int* tiles, const int* qStarts, float scale_log2, int window, const wg9_maps* maps = nullptr) {
	const int h = blockIdx.x;
	const int seq = tiles[2 * blockIdx.y], qtile = tiles[2 * blockIdx.y + 1];
	const int q0 = qStarts[seq], T = qStarts[seq + 1] - q0;
	const usize qs = (usize)H * HD, ks = (usize)K * HD;
	const wg_contig kv = {ks};
	prefill_wg9_body<HD, 128, 3, 24, 240, OV, PP>(out + (usize)q0 * qs, q + (usize)q0 * qs, k + (usize)q0 * ks, v + (usize)q0 * ks, T, H, h, h / (H / K),
		qtile, 0, scale_log2, window, kv, maps, q0);
}

// attn_prefill_wg9_d128_bf16: as wg6's, head width 128.
extern "C" __global__ void __launch_bounds__(WG9_NT, 1) attn_prefill_wg9_d128_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_wg9_fixed<128>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}
// attn_varlen_prefill_wg9_d128_bf16: as wg6's, head width 128.
extern "C" __global__ void __launch_bounds__(WG9_NT, 1) attn_varlen_prefill_wg9_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_wg9_varlen_paged<128>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
// attn_varlen_contig_prefill_wg9_d128_bf16: as wg6's, head width 128.
extern "C" __global__ void __launch_bounds__(WG9_NT, 1) attn_varlen_contig_prefill_wg9_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* k, const bf16_t* v, int H, int K, const int* tiles, const int* qStarts, float scale_log2, int window) {
	prefill_wg9_varlen_contig<128>(out, q, k, v, H, K, tiles, qStarts, scale_log2, window);
}
// attn_prefill_wg9_d64_bf16: as wg6's, head width 64.
extern "C" __global__ void __launch_bounds__(WG9_NT, 1) attn_prefill_wg9_d64_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_wg9_fixed<64>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}
// attn_varlen_prefill_wg9_d64_bf16: as wg6's, head width 64.
extern "C" __global__ void __launch_bounds__(WG9_NT, 1) attn_varlen_prefill_wg9_d64_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_wg9_varlen_paged<64>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
// attn_varlen_contig_prefill_wg9_d64_bf16: as wg6's, head width 64.
extern "C" __global__ void __launch_bounds__(WG9_NT, 1) attn_varlen_contig_prefill_wg9_d64_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* k, const bf16_t* v, int H, int K, const int* tiles, const int* qStarts, float scale_log2, int window) {
	prefill_wg9_varlen_contig<64>(out, q, k, v, H, K, tiles, qStarts, scale_log2, window);
}

// Variant wg9t: wg9 with the key and value tiles copied by TMA (one
// producer thread; prefill_wg9_body), head width 128, its maps
// (runtime/cuda TensorMapBF16: the cache's or packed rows' K·128 columns,
// boxes of 128 rows × 64 columns) its last parameter. The fixed-length
// kernel's maps end at the forward's last position (pos + T rows); the
// paged pool keeps wg9's cp.async copies.

// attn_prefill_wg9t_d128_bf16: wg9's, copies by TMA.
extern "C" __global__ void __launch_bounds__(WG9_NT, 1) attn_prefill_wg9t_d128_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window, const __grid_constant__ wg9_maps maps) {
	prefill_wg9_fixed<128>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window, &maps);
}
// attn_varlen_prefill_wg9t_d128_bf16: wg9's (cp.async copies).
extern "C" __global__ void __launch_bounds__(WG9_NT, 1) attn_varlen_prefill_wg9t_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_wg9_varlen_paged<128>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
// attn_varlen_contig_prefill_wg9t_d128_bf16: wg9's, copies by TMA.
extern "C" __global__ void __launch_bounds__(WG9_NT, 1) attn_varlen_contig_prefill_wg9t_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* k, const bf16_t* v, int H, int K, const int* tiles, const int* qStarts, float scale_log2, int window,
		const __grid_constant__ wg9_maps maps) {
	prefill_wg9_varlen_contig<128>(out, q, k, v, H, K, tiles, qStarts, scale_log2, window, &maps);
}

// Variant wg9o: wg9t with FlashAttention-3's intra-warpgroup overlap (OV
// in prefill_wg9_body): a consumer's softmax probabilities of a tile are
// computed while its P·V of the previous tile runs; the same operations in
// the same order as wg6.

// attn_prefill_wg9o_d128_bf16: wg9t's with the overlap.
extern "C" __global__ void __launch_bounds__(WG9_NT, 1) attn_prefill_wg9o_d128_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window, const __grid_constant__ wg9_maps maps) {
	prefill_wg9_fixed<128, true>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window, &maps);
}
// attn_varlen_prefill_wg9o_d128_bf16: wg9's (cp.async copies) with the overlap.
extern "C" __global__ void __launch_bounds__(WG9_NT, 1) attn_varlen_prefill_wg9o_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_wg9_varlen_paged<128, true>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
// attn_varlen_contig_prefill_wg9o_d128_bf16: wg9t's with the overlap.
extern "C" __global__ void __launch_bounds__(WG9_NT, 1) attn_varlen_contig_prefill_wg9o_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* k, const bf16_t* v, int H, int K, const int* tiles, const int* qStarts, float scale_log2, int window,
		const __grid_constant__ wg9_maps maps) {
	prefill_wg9_varlen_contig<128, true>(out, q, k, v, H, K, tiles, qStarts, scale_log2, window, &maps);
}

// Variant wg9f: wg9o without the turns (PP false in prefill_wg9_body).

// attn_prefill_wg9f_d128_bf16: wg9o's without the turns.
extern "C" __global__ void __launch_bounds__(WG9_NT, 1) attn_prefill_wg9f_d128_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window, const __grid_constant__ wg9_maps maps) {
	prefill_wg9_fixed<128, true, false>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window, &maps);
}
// attn_varlen_prefill_wg9f_d128_bf16: wg9o's without the turns.
extern "C" __global__ void __launch_bounds__(WG9_NT, 1) attn_varlen_prefill_wg9f_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_wg9_varlen_paged<128, true, false>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
// attn_varlen_contig_prefill_wg9f_d128_bf16: wg9o's without the turns.
extern "C" __global__ void __launch_bounds__(WG9_NT, 1) attn_varlen_contig_prefill_wg9f_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* k, const bf16_t* v, int H, int K, const int* tiles, const int* qStarts, float scale_log2, int window,
		const __grid_constant__ wg9_maps maps) {
	prefill_wg9_varlen_contig<128, true, false>(out, q, k, v, H, K, tiles, qStarts, scale_log2, window, &maps);
}
