// Prefill attention on warpgroup MMA with a producer warpgroup and the
// ping-pong of two consumer warpgroups (variant wg4, FT_PREFILL_VARIANT=wg4).
// An experimental variant of sm90a/extra/: compiled as a module of its own
// (SourceSM90aExtra: SourceSM90a, whose helpers it uses, then this file)
// only when wg4 is asked for. Same arguments and results as wg and wg3.
//
// wg3 (prefill_wg3.cu) with FlashAttention-3's warp specialisation: a block
// of 384 threads is one producer warpgroup (warpgroup 0) and two consumer
// warpgroups (1 and 2, 64 query rows each: consumer c = warpgroup − 1 owns
// rows c·64.. of the block's 128). The producer copies the key and value
// tiles of 128 positions with cp.async into wg's 128-byte swizzled layout,
// three stages, and each copy completes on an mbarrier
// (cp.async.mbarrier.arrive.noinc): per stage a "full" barrier for the key
// tile and one for the value tile (count 128, one arrival per producer
// thread once its copies have landed), and an "empty" barrier each (count
// 256, one arrival per consumer thread once its wgmmas reading the tile are
// done). No block-wide barrier runs in the main loop: the consumers wait
// for the tiles they read, the producer for the stages it refills, and the
// consumers take the tensor cores in turns on two named barriers exactly
// as wg3's warpgroups do (consumer 0's softmax runs while consumer 1's
// wgmmas run and the other way round). setmaxnreg hands the producer's
// registers to the consumers (24 and 240 a thread: 128·24 + 256·240 ≤
// 65,536).
//
// A consumer's turn on tile t, G(t): wait for K_t's full barrier and for
// V_{t−1}'s; wait for its turn (named barrier); issue S_t = Q·K_tᵀ (if any
// of its rows sees tile t) and the P·V of tile t−1 (if it saw it), commit,
// let the other consumer go, wait for its wgmmas; release K_t and V_{t−1}
// (every consumer thread arrives on their empty barriers, whether or not
// its warpgroup read the tile). Then X(t), the masking and online softmax
// of S_t into the bf16 P fragments of the next turn (prefill_wg3.cu). After
// the last tile, V of the last tile is waited for and the last P·V runs.
// Keys and values have barriers of their own because V_t is read one turn
// after K_t: the producer may refill K_t's stage one turn earlier.
//
// Barrier protocol and why it cannot deadlock:
//  1. Phases: tile t (i = t − jfirst) uses stage i mod 3; its full barriers
//     complete their phase i/3 when its copies land (the consumer waits for
//     parity (i/3) mod 2), its empty barriers their phase i/3 when both
//     consumers have released it; the producer refills the stage for tile
//     t+3 after waiting for the empty barrier's phase i/3. A consumer thread
//     arrives on an empty barrier of tile t only after it has waited for
//     the full barrier of tile t (so after the producer has waited for the
//     release of tile t−3 by both consumers): no arrival can fall into the
//     phase of another tile.
//  2. Every consumer thread of the block takes the same tiles
//     [jfirst, ntiles) (bounds of the block's query tile only), waits for
//     every full barrier of them and releases every empty one; the producer
//     fills every one of them. The producer waits only for releases of
//     tiles ≤ t−3 while it fills tile t; a consumer waits for tiles ≤ t
//     while it is at tile t, and for its turn; the turns alternate (named
//     barrier 1: consumer 0 may issue, arrived by consumer 1 after issuing
//     G(t), t not the last; consumer 0 waits before G(t), t not the first;
//     named barrier 2: consumer 1 may issue, arrived by consumer 0 after
//     issuing every G(t), waited for by consumer 1 before every G(t); the
//     counting argument of prefill_wg3.cu, points 2 and 3, holds as is). A
//     consumer waiting at G(t) for its turn waits for the other's issue of
//     G(t) or G(t−1), which depends on full barriers of tiles ≤ t only; the
//     producer's fill of tile t depends on releases of tile t−3, made by
//     both consumers at G(t−3) or G(t−2), before either could reach G(t).
//     So no cycle of waits.
//  3. Should the protocol still be broken, every mbarrier wait is bounded:
//     after about 2^33 clocks (seconds) it traps, failing the launch instead
//     of hanging the device.
//
// Visibility: the producer's cp.async writes are generic-proxy writes that
// the consumers' wgmmas read through the async proxy: a consumer thread
// fences (fence.proxy.async) after its full-barrier waits (acquire) and
// before its wgmmas. The query tile: each consumer copies its own 64 rows
// (cp.async), waits, fences and syncs its warpgroup (named barrier 3 + c).
//
// Shared memory: wg's layout (query tile, three stages of a key and a value
// tile, WG_SMEM), then the 12 mbarriers: WG4_SMEM.

#define WG4_NT 384          // threads per block: the producer warpgroup and two consumers
#define WG4_PRODUCER_REGS 56  // registers a producer thread keeps (setmaxnreg.dec)
#define WG4_CONSUMER_REGS 224 // registers a consumer thread takes (setmaxnreg.inc)
#define WG4_BARS 128          // bytes of mbarriers after the stages (12 used)
#define WG4_SMEM(HD, BN, NS) (WG_SMEM(HD, BN, NS) + WG4_BARS)
#define WG4_WAIT_CLOCKS (1ll << 33)  // an mbarrier wait longer than this traps

// wg4_bar_sync and wg4_bar_arrive are bar.sync and bar.arrive of named
// barrier id with 256 threads (both consumer warpgroups).
__device__ __forceinline__ void wg4_bar_sync(int id) { asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ void wg4_bar_arrive(int id) { asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory"); }

// wg4_mbar_init initialises the mbarrier at shared address bar with count
// arrivals a phase.
__device__ __forceinline__ void wg4_mbar_init(unsigned bar, unsigned count) {
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// wg4_mbar_arrive is one arrival on the mbarrier at bar (release).
__device__ __forceinline__ void wg4_mbar_arrive(unsigned bar) {
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// wg4_mbar_cp_arrive makes the mbarrier at bar receive one arrival once
// every cp.async this thread has issued so far has landed (noinc: the
// arrival is one of the count the barrier was initialised with).
__device__ __forceinline__ void wg4_mbar_cp_arrive(unsigned bar) {
	asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// wg4_mbar_wait waits until the phase of parity par of the mbarrier at bar
// has completed (acquire); traps after WG4_WAIT_CLOCKS.
__device__ __forceinline__ void wg4_mbar_wait(unsigned bar, unsigned par) {
	long long t0 = 0;
	for (int n = 0;; n++) {
		unsigned ok;
		asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
			: "=r"(ok) : "r"(bar), "r"(par) : "memory");
		if (ok) return;
		if (n == 0) {
			t0 = clock64();
		} else if (clock64() - t0 > WG4_WAIT_CLOCKS) {
			__trap();
		}
	}
}

// wg4_flag<B> is a compile-time bool argument of a generic lambda.
template <bool B>
struct wg4_flag {
	static constexpr bool value = B;
};

// prefill_wg4_produce is the producer warpgroup's loop: the key and value
// tiles of [jfirst, ntiles) into the ring (file comment). wtid is the
// thread's index in the warpgroup.
template <int HD, int BN, int NS, class KV>
__device__ __forceinline__ void prefill_wg4_produce(unsigned sKV, unsigned sBar, const bf16_t* kc, const bf16_t* vc, const KV& kv,
		int kvh, int jfirst, int ntiles, int kvEnd, int wtid) {
	constexpr int CPR = HD / 8, RPP = 128 / CPR, NP = BN / RPP, TILE = BN * HD * 2;
	const int cr = wtid / CPR, cc = wtid % CPR;
	const unsigned dsw = wg_swz<BN>(cr, cc);  // rows cr + p·RPP keep cr's swizzle (RPP is a multiple of 8)
	const usize hoff = (usize)kvh * HD + cc * 8;
	for (int t = jfirst; t < ntiles; t++) {
		const int i = t - jfirst, s = i % NS;
		const unsigned st = sKV + (unsigned)s * (2 * TILE) + dsw;
		const int p0 = t * BN + cr;
		if (i >= NS) wg4_mbar_wait(sBar + 8 * (2 * NS + s), (i / NS - 1) & 1);  // K of tile t−3 released
#pragma unroll 8
		for (int p = 0; p < NP; p++) {
			const bool ok = p0 + p * RPP < kvEnd;
			wg_cp16(st + p * RPP * 128, ok ? kc + kv.row(p0 + p * RPP) + hoff : kc, ok);
		}
		wg4_mbar_cp_arrive(sBar + 8 * s);
		if (i >= NS) wg4_mbar_wait(sBar + 8 * (3 * NS + s), (i / NS - 1) & 1);  // V of tile t−3 released
#pragma unroll 8
		for (int p = 0; p < NP; p++) {
			const bool ok = p0 + p * RPP < kvEnd;
			wg_cp16(st + TILE + p * RPP * 128, ok ? vc + kv.row(p0 + p * RPP) + hoff : vc, ok);
		}
		wg4_mbar_cp_arrive(sBar + 8 * (NS + s));
	}
	asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// prefill_wg4_body is prefill_wg3_body (same arguments and results) with a
// producer warpgroup (file comment).
template <int HD, int BN, int NS, class KV>
__device__ __forceinline__ void prefill_wg4_body(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int T, int H,
		int h, int kvh, int qtile, int pos, float scale_log2, int window, const KV& kv) {
	constexpr int BM = WG_BM;
	constexpr int CPR = HD / 8, RPP = 128 / CPR;  // 16-byte chunks per row; rows per copy pass of a warpgroup
	constexpr int QT = BM * HD * 2;               // bytes of the query tile
	constexpr int TILE = BN * HD * 2;             // bytes of a key or value tile
	constexpr int KS = HD / 16;                   // k-steps of S = Q·Kᵀ
	constexpr int PS = BN / 16;                   // k-steps of O += P·V
	constexpr int SN = BN / 2, ON = HD / 2;       // accumulators per thread of S and O
	static_assert(NS >= 2, "two or more stages");
	extern __shared__ __attribute__((aligned(1024))) unsigned char prefill_wg4_sm[];
	const unsigned sQ = (smem_u32(prefill_wg4_sm) + 1023) & ~1023u, sKV = sQ + QT, sBar = sKV + NS * 2 * TILE;
	// Barriers at sBar: full K [NS], full V [NS], empty K [NS], empty V [NS].
	const auto fullK = [&](int i) { return sBar + 8 * (i % NS); };
	const auto fullV = [&](int i) { return sBar + 8 * (NS + i % NS); };
	const auto emptyK = [&](int i) { return sBar + 8 * (2 * NS + i % NS); };
	const auto emptyV = [&](int i) { return sBar + 8 * (3 * NS + i % NS); };
	const int tid = threadIdx.x, wg = tid >> 7, wtid = tid & 127, warp = wtid >> 5, lane = tid & 31;
	const int b0 = qtile * BM;  // the block's first row
	const int lastRow = min(T, b0 + BM) - 1;
	const int kvEnd = pos + lastRow + 1;
	const int ntiles = (kvEnd + BN - 1) / BN;
	const int jfirst = window > 0 ? max(0, pos + b0 - window + 1) / BN : 0;

	if (tid == 0) {
		for (int i = 0; i < NS; i++) {
			wg4_mbar_init(fullK(i), 128);
			wg4_mbar_init(fullV(i), 128);
			wg4_mbar_init(emptyK(i), 256);
			wg4_mbar_init(emptyV(i), 256);
		}
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
	}
	__syncthreads();  // the barriers are initialised (the only block-wide barrier)

	if (wg == 0) {
		asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(WG4_PRODUCER_REGS));
		prefill_wg4_produce<HD, BN, NS>(sKV, sBar, kc, vc, kv, kvh, jfirst, ntiles, kvEnd, wtid);
		return;
	}
	asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(WG4_CONSUMER_REGS));

	const int c = wg - 1;  // the consumer
	const int g = lane >> 2, tg = lane & 3;
	const int w0 = b0 + c * 64;      // the consumer's first row
	const usize qs = (usize)H * HD;  // elements between tokens of q and out
	const bool live = w0 < T;
	const int wq0 = pos + w0, wq1 = pos + min(T, w0 + 64) - 1;  // the consumer's query positions
	const int qa = pos + w0 + warp * 16 + g;                     // position of this thread's first row (the second is +8)
	const int wm = window > 0 ? window - 1 : 1 << 30;            // a key at kp is visible to qp when qp−wm ≤ kp ≤ qp

	{  // the consumer's 64 query rows, rows past T zero
		const int cr = wtid / CPR, cc = wtid % CPR;
		const bf16_t* qh = q + (usize)h * HD + cc * 8;
#pragma unroll
		for (int i = 0; i < 64 / RPP; i++) {
			const int r = c * 64 + cr + i * RPP;
			const bool ok = b0 + r < T;
			wg_cp16(sQ + wg_swz<BM>(r, cc), ok ? qh + (usize)(b0 + r) * qs : q, ok);
		}
		cp_async_commit();
		cp_async_wait0();
		asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // visible to wgmma (the async proxy)
		asm volatile("bar.sync %0, 128;\n" ::"r"(3 + c) : "memory");      // the consumer's rows are all there
	}

	float o[ON];
#pragma unroll
	for (int i = 0; i < ON; i++) o[i] = 0.f;
	float m0 = -FT_INF, m1 = -FT_INF, l0 = 0.f, l1 = 0.f;  // running maxima (scaled) and this thread's share of the row sums
	// S of the tile between G and X, and P of the previous visible tile (A
	// fragments of its P·V); defined before the loop (prefill_wg3.cu).
	float s[SN];
#pragma unroll
	for (int i = 0; i < SN; i++) s[i] = 0.f;
	unsigned pf[PS][4];
#pragma unroll
	for (int i = 0; i < PS; i++) pf[i][0] = pf[i][1] = pf[i][2] = pf[i][3] = 0;
	bool pending = false;  // that P·V (of tile t−1 at G(t)) is yet to be issued
	unsigned pst = 0;      // its stage

	// visible: does any query of the consumer see a key of tile t
	// (warpgroup-uniform)?
	const auto visible = [&](int t) {
		const int j0 = t * BN;
		return live && j0 <= wq1 && !(window > 0 && j0 + BN - 1 < wq0 - window + 1);
	};
	const auto stage = [&](int t) { return sKV + (unsigned)((t - jfirst) % NS) * (2 * TILE); };

	// G(t): the consumer's turn on the tensor cores (file comment).
	const auto arrive = [&](int t) {
		if (c == 0) {
			wg4_bar_arrive(2);
		} else if (t < ntiles - 1) {
			wg4_bar_arrive(1);
		}
	};
	const auto turn = [&](int t, auto doS, auto doPV) {
		wg_pin<ON>(o);
		wg_fence();
		if constexpr (decltype(doS)::value) {
			const unsigned st = stage(t);
#pragma unroll
			for (int kk = 0; kk < KS; kk++) {
				const unsigned qaddr = sQ + (kk >> 2) * (BM * 128) + c * (64 * 128) + (kk & 3) * 32;
				const unsigned kaddr = st + (kk >> 2) * (BN * 128) + (kk & 3) * 32;
				wg_ss<BN>(s, wg_desc(qaddr, 16, 1024), wg_desc(kaddr, 16, 1024), kk > 0);
			}
		}
		if constexpr (decltype(doPV)::value) {
#pragma unroll
			for (int kk = 0; kk < PS; kk++) wg_rs<HD>(o, pf[kk], wg_desc(pst + TILE + kk * 2048, BN * 128, 1024));
		}
		wg_commit();
		arrive(t);
		wg_wait0();
		wg_pin<SN>(s);
		wg_pin<ON>(o);
	};
	const auto gemms = [&](int t) {
		const int i = t - jfirst;
		wg4_mbar_wait(fullK(i), (i / NS) & 1);
		if (i > 0) wg4_mbar_wait(fullV(i - 1), ((i - 1) / NS) & 1);
		asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the copies are visible to wgmma
		if (c == 0) {
			if (t > jfirst) wg4_bar_sync(1);
		} else {
			wg4_bar_sync(2);
		}
		const bool vis = visible(t);
		if (vis && pending) {
			turn(t, wg4_flag<true>(), wg4_flag<true>());
		} else if (vis) {
			turn(t, wg4_flag<true>(), wg4_flag<false>());
		} else if (pending) {
			turn(t, wg4_flag<false>(), wg4_flag<true>());
		} else {
			arrive(t);
		}
		pending = false;
		wg4_mbar_arrive(emptyK(i));  // K_t's S is done (or was never issued)
		if (i > 0) wg4_mbar_arrive(emptyV(i - 1));  // so is V_{t−1}'s P·V
	};

	// X(t): masking and online softmax of S_t into pf (prefill_wg3.cu).
	const auto softmax = [&](int t) {
		if (!visible(t)) return;
		const int j0 = t * BN;
		const bool edge = j0 + BN - 1 > wq0 || (window > 0 && j0 < wq1 - window + 1);
		// s[4i+e]: row qa (e < 2) or qa+8 (e ≥ 2), key j0 + 8i + 2tg + (e & 1).
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
		float mx0 = -FT_INF, mx1 = -FT_INF;
#pragma unroll
		for (int i = 0; i < BN / 8; i++) {
			mx0 = fmaxf(mx0, fmaxf(s[4 * i + 0], s[4 * i + 1]));
			mx1 = fmaxf(mx1, fmaxf(s[4 * i + 2], s[4 * i + 3]));
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
			const float p0 = wg_ex2(fmaf(s[4 * i + 0], scale_log2, -ms0));
			const float p1 = wg_ex2(fmaf(s[4 * i + 1], scale_log2, -ms0));
			const float p2 = wg_ex2(fmaf(s[4 * i + 2], scale_log2, -ms1));
			const float p3 = wg_ex2(fmaf(s[4 * i + 3], scale_log2, -ms1));
			rs0 += p0 + p1;
			rs1 += p2 + p3;
			pf[i >> 1][(i & 1) * 2 + 0] = pack_bf16(p0, p1);
			pf[i >> 1][(i & 1) * 2 + 1] = pack_bf16(p2, p3);
		}
		l0 = l0 * a0 + rs0;
		l1 = l1 * a1 + rs1;
		// O holds every P·V up to the previous visible tile (G waited for
		// it): it takes the new maxima.
#pragma unroll
		for (int i = 0; i < HD / 8; i++) {
			o[4 * i + 0] *= a0;
			o[4 * i + 1] *= a0;
			o[4 * i + 2] *= a1;
			o[4 * i + 3] *= a1;
		}
		pending = true;
		pst = stage(t);
	};

	for (int t = jfirst; t < ntiles; t++) {
		gemms(t);
		softmax(t);
	}
	{  // V of the last tile, and its P·V
		const int i = ntiles - 1 - jfirst;
		wg4_mbar_wait(fullV(i), (i / NS) & 1);
		asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
	}
	if (pending) {
		wg_pin<ON>(o);
		wg_fence();
#pragma unroll
		for (int kk = 0; kk < PS; kk++) wg_rs<HD>(o, pf[kk], wg_desc(pst + TILE + kk * 2048, BN * 128, 1024));
		wg_commit();
		wg_wait0();
		wg_pin<ON>(o);
	}
	wg_store_out<HD>(o, l0, l1, sQ, c, 3 + c, warp, g, tg, wtid, w0, T, out, qs, h);
}

// attn_prefill_wg4_d128_bf16 is attn_prefill_wg_d128_bf16 with a producer
// warpgroup (file comment): grid (H, ceil(T/128)), the last query tile
// first, 384 threads, WG4_SMEM(128, 128, 3) bytes.
extern "C" __global__ void __launch_bounds__(WG4_NT, 1) attn_prefill_wg4_d128_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	const wg_contig kv = {(usize)K * 128};
	prefill_wg4_body<128, 128, 3>(out, q, kc, vc, T, H, blockIdx.x, blockIdx.x / (H / K), gridDim.y - 1 - blockIdx.y, ft_pos(posp, pos0),
		scale_log2, window, kv);
}

// attn_prefill_wg4_d64_bf16 is attn_prefill_wg4_d128_bf16 for head width
// 64, WG4_SMEM(64, 128, 3) bytes.
extern "C" __global__ void __launch_bounds__(WG4_NT, 1) attn_prefill_wg4_d64_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	const wg_contig kv = {(usize)K * 64};
	prefill_wg4_body<64, 128, 3>(out, q, kc, vc, T, H, blockIdx.x, blockIdx.x / (H / K), gridDim.y - 1 - blockIdx.y, ft_pos(posp, pos0),
		scale_log2, window, kv);
}

// prefill_wg4_varlen is prefill_wg_varlen with a producer warpgroup.
template <int HD>
__device__ __forceinline__ void prefill_wg4_varlen(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int H, int K,
		const int* tiles, const int* qStarts, const int* lens, const int* table, int maxBlocks, int bs, float scale_log2, int window) {
	const int h = blockIdx.x;
	const int seq = tiles[2 * blockIdx.y], qtile = tiles[2 * blockIdx.y + 1];
	const int q0 = qStarts[seq], T = qStarts[seq + 1] - q0;
	const usize qs = (usize)H * HD;
	const wg_paged kv = {table + (usize)seq * maxBlocks, bs, (usize)K * HD};
	prefill_wg4_body<HD, 128, 3>(out + (usize)q0 * qs, q + (usize)q0 * qs, kc, vc, T, H, h, h / (H / K), qtile, lens[seq] - T,
		scale_log2, window, kv);
}

// attn_varlen_prefill_wg4_d128_bf16 is attn_varlen_prefill_wg_d128_bf16
// with a producer warpgroup: tiles of 128 rows, 384 threads,
// WG4_SMEM(128, 128, 3) bytes.
extern "C" __global__ void __launch_bounds__(WG4_NT, 1) attn_varlen_prefill_wg4_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_wg4_varlen<128>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}

// attn_varlen_prefill_wg4_d64_bf16 is attn_varlen_prefill_wg4_d128_bf16
// for head width 64, WG4_SMEM(64, 128, 3) bytes.
extern "C" __global__ void __launch_bounds__(WG4_NT, 1) attn_varlen_prefill_wg4_d64_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_wg4_varlen<64>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
