// Prefill attention on warpgroup MMA with the ping-pong of the two
// warpgroups and FlashAttention-3's intra-warpgroup overlap (variant wg5,
// FT_PREFILL_VARIANT=wg5). An experimental variant of sm90a/extra/:
// compiled as a module of its own (SourceSM90aExtra: SourceSM90a, whose
// helpers it uses, then this file) only when wg5 is asked for. Same
// arguments and results as wg and wg3.
//
// wg3 (prefill_wg3.cu: two warpgroups × 64 query rows, 128-position
// key/value tiles by cp.async into 128-byte swizzled shared memory, the
// warpgroups' turns on the tensor cores ordered by two named barriers)
// where a warpgroup's turn G(t) commits its two products as two wgmma
// groups, S_t = Q·K_tᵀ first, then the P·V of its previous visible tile,
// and waits only for S (wgmma.wait_group 1): the masking and online
// softmax of S_t, X(t), runs while that P·V is still on the tensor cores.
// Only then does it wait for the P·V (wait_group 0) and rescale O by the
// new maxima's factor: O_new = (O_old + P_{t−1}·V_{t−1})·a, the same sum
// wg3 forms as O_old·a + … with O_old already including P_{t−1}·V_{t−1}.
// X(t) writes the bf16 P fragments of tile t into one of two buffers
// while the in-flight P·V reads the other (pf[pb] and pf[1−pb], chosen per
// turn by a warpgroup-uniform branch so that every index is a constant).
//
// Shared memory: the same bytes as wg3 (WG_SMEM(HD, 128, 3): the query
// tile and six key/value tiles) but split into two key stages and four
// value stages. Why: warpgroup 1's turn on tile j−1 comes before the block
// barrier B(j) (its softmax after it, so that warpgroup 0's turn on tile j
// runs during it: the ping-pong), and with the overlap its P·V of tile j−2
// is still in flight at B(j), when wg3's three combined stages would
// overwrite tile j−2. Per block tile j (copies of tile j waited for, one
// block barrier, tile j+1's copies issued: B(j)) warpgroup 0 does B(j),
// G(j) (issue S_j and P·V_{j−1}, wait for S_j), X(j), wait for P·V_{j−1};
// warpgroup 1 does G(j−1) (issue S_{j−1} and P·V_{j−2}, wait for S_{j−1}),
// B(j), X(j−1), wait for P·V_{j−2}; after the last block tile warpgroup 1
// does G and X of the last. The copies issued at B(j) overwrite key stage
// (j+1) mod 2, last read by the S of tile j−1 (warpgroup 0 waited for it
// in step j−1, warpgroup 1 before B(j)), and value stage (j+1) mod 4, last
// read by the P·V of tile j−3 (issued in turn j−2 of either warpgroup and
// waited for in the same step, before B(j−1) at the latest; stages are
// counted from the block's first tile jfirst). A warpgroup's visible tiles
// are consecutive, so the P·V of visible tile u is issued in turn u+1.
//
// Why this cannot deadlock: the barrier operations (block barrier, named
// barriers 1 and 2, arrivals and waits) are those of wg3 in the same order
// for each warpgroup (warpgroup 0: B(j), wait on 1 if t > jfirst, issue,
// arrive on 2; warpgroup 1: wait on 2, issue, arrive on 1 if t is not the
// last, B(j)), so prefill_wg3.cu's counting argument (points 1–4) holds as
// is. What moved are wgmma waits (wait_group 1 and 0), which wait only for
// the warpgroup's own committed wgmmas: those complete whatever the other
// warpgroup does, so they add no edge to the wait graph. A wgmma group in
// flight across the block barrier (warpgroup 1's P·V) is allowed: the
// barrier does not wait for it, and nothing in B(j) touches its registers
// or its value stage.
//
// ptxas serialises every wgmma of a function (C7513 "wgmma.mma_async
// instructions are serialized") when accumulators merge from optional
// wgmmas between issue and wait (wg3's comment), and when a non-wgmma
// instruction defines an input register of a wgmma between the fence and
// the wait that retires it. So: each combination of the two products (both,
// S only, P·V only) and of the P buffer is its own branch from the fence
// to the last wait; the first k-step of S writes its accumulators as
// outputs only (wg5_ss0) and the softmax never rewrites them (masked values
// are formed on the fly), so that the masking defines no wgmma input; and
// the P fragments of tile t go to the other buffer, never copied over the
// in-flight P·V's. A first version wrote them to a temporary copied into
// pf after wait_group 0: ptxas coalesced the copy, the P conversions then
// defined the in-flight P·V's A registers, and it serialised every wgmma
// (NVRTC 12.4). And ptxas moved the exponentials and conversions of X(t)
// after wait_group 0 (nothing orders them before it): a branch on the row
// sums (l0 + l1 < 0, never true, traps) before the wait keeps every
// exponential ahead of it. Check: no C7513 in the NVRTC log, and in the SASS one
// WARPGROUP.DEPBAR per wgmma wait of the source (wait_group 1 as
// "DEPBAR.LE gsb0, 0x1"), not one per HGMMA.

// wg5_wait1 waits for all but the last committed wgmma group of the
// warpgroup.
__device__ __forceinline__ void wg5_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }

// wg5_pin_pf keeps the compiler from reusing the n P fragments pf of an
// in-flight P·V before the wait for it (an empty asm that "writes" them):
// the wgmma reads its register operands until it is done, but to the
// front end they are consumed at issue.
template <int N>
__device__ __forceinline__ void wg5_pin_pf(unsigned (&pf)[N][4]) {
#pragma unroll
	for (int i = 0; i < N; i++) asm volatile("" : "+r"(pf[i][0]), "+r"(pf[i][1]), "+r"(pf[i][2]), "+r"(pf[i][3])::"memory");
}

// wg5_ss0<N> is wg_ss<N> with acc false (d = A·B) and d an output only:
// S's accumulators are then no input of a wgmma, so the masking that
// rewrites them while a P·V is in flight defines no wgmma input register
// (ptxas would serialise every wgmma of the function).
template <int N>
__device__ __forceinline__ void wg5_ss0(float* d, unsigned long long da, unsigned long long db);
#define WG5_O8(d, i) \
	"=f"(d[i]), "=f"(d[i + 1]), "=f"(d[i + 2]), "=f"(d[i + 3]), "=f"(d[i + 4]), "=f"(d[i + 5]), "=f"(d[i + 6]), "=f"(d[i + 7])
template <>
__device__ __forceinline__ void wg5_ss0<64>(float* d, unsigned long long da, unsigned long long db) {
	asm volatile(
		"{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
		"wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_R32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
		: WG5_O8(d, 0), WG5_O8(d, 8), WG5_O8(d, 16), WG5_O8(d, 24)
		: "l"(da), "l"(db), "r"(0));
}
template <>
__device__ __forceinline__ void wg5_ss0<128>(float* d, unsigned long long da, unsigned long long db) {
	asm volatile(
		"{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
		"wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_R64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
		: WG5_O8(d, 0), WG5_O8(d, 8), WG5_O8(d, 16), WG5_O8(d, 24), WG5_O8(d, 32), WG5_O8(d, 40), WG5_O8(d, 48), WG5_O8(d, 56)
		: "l"(da), "l"(db), "r"(0));
}

// wg5_load_kv is wg_load_kv with the key tile at shared address ks and the
// value tile at vs (key and value stages apart).
template <int HD, int BN, class KV>
__device__ __forceinline__ void wg5_load_kv(unsigned ks, unsigned vs, const bf16_t* kc, const bf16_t* vc, const KV& kv, int kvh, int j0,
		int kvEnd) {
	constexpr int CPR = HD / 8, RPP = WG_NT / CPR, NP = BN / RPP;
	const int cr = threadIdx.x / CPR, cc = threadIdx.x % CPR;
	usize off[NP];
#pragma unroll
	for (int i = 0; i < NP; i++) {
		const int p = j0 + cr + i * RPP;
		off[i] = p < kvEnd ? kv.row(p) + (usize)kvh * HD + cc * 8 : 0;
	}
	const unsigned sw = wg_swz<BN>(cr, cc);  // rows cr + i·RPP keep cr's swizzle (RPP is a multiple of 8)
#pragma unroll
	for (int i = 0; i < NP; i++) {
		const bool ok = j0 + cr + i * RPP < kvEnd;
		wg_cp16(ks + sw + i * RPP * 128, kc + off[i], ok);
		wg_cp16(vs + sw + i * RPP * 128, vc + off[i], ok);
	}
}

// prefill_wg5_body is prefill_wg_body (same arguments and results) with
// wg3's ping-pong and the intra-warpgroup overlap (file comment).
template <int HD, int BN, class KV>
__device__ __forceinline__ void prefill_wg5_body(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int T, int H,
		int h, int kvh, int qtile, int pos, float scale_log2, int window, const KV& kv) {
	constexpr int BM = WG_BM;
	constexpr int QT = BM * HD * 2;              // bytes of the query tile
	constexpr int TILE = BN * HD * 2;            // bytes of a key or value tile
	constexpr int KS = HD / 16;                  // k-steps of S = Q·Kᵀ
	constexpr int PS = BN / 16;                  // k-steps of O += P·V
	constexpr int SN = BN / 2, ON = HD / 2;      // accumulators per thread of S and O
	constexpr int NK = 2, NV = 4;                // key and value stages (file comment)
	static_assert(WG_SMEM(HD, BN, 3) == 1024 + QT + (NK + NV) * TILE, "the shared memory of wg3");
	extern __shared__ __attribute__((aligned(1024))) unsigned char prefill_wg5_sm[];
	const unsigned sQ = (smem_u32(prefill_wg5_sm) + 1023) & ~1023u, sK = sQ + QT, sV = sK + NK * TILE;
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

	const auto kst = [&](int t) { return sK + (unsigned)((t - jfirst) % NK) * TILE; };
	const auto vst = [&](int t) { return sV + (unsigned)((t - jfirst) % NV) * TILE; };

	wg_load_q<HD>(sQ, q, h, b0, T, qs, tid);  // the query tile (its own group)
	cp_async_commit();
	wg5_load_kv<HD, BN>(kst(jfirst), vst(jfirst), kc, vc, kv, kvh, jfirst * BN, kvEnd);
	cp_async_commit();

	float o[ON];
#pragma unroll
	for (int i = 0; i < ON; i++) o[i] = 0.f;
	float m0 = -FT_INF, m1 = -FT_INF, l0 = 0.f, l1 = 0.f;  // running maxima (scaled) and this thread's share of the row sums
	// S of the tile, and P of the previous visible tile (A fragments of its
	// P·V). Defined before the loop: ptxas serialises every wgmma of a
	// function where a wgmma's register operand may be undefined on entry
	// to its loop.
	float s[SN];
#pragma unroll
	for (int i = 0; i < SN; i++) s[i] = 0.f;
	// Two buffers of P fragments: the pending P·V reads pf[pb] while the
	// softmax of the next tile writes pf[1−pb] (file comment).
	unsigned pf[2][PS][4];
#pragma unroll
	for (int b = 0; b < 2; b++) {
#pragma unroll
		for (int i = 0; i < PS; i++) pf[b][i][0] = pf[b][i][1] = pf[b][i][2] = pf[b][i][3] = 0;
	}
	bool pending = false;  // that P·V is yet to be issued
	int pb = 0;            // the buffer of its P
	unsigned pvs = 0;      // its value stage

	// visible: does any query of the warpgroup see a key of tile t
	// (warpgroup-uniform)?
	const auto visible = [&](int t) {
		const int j0 = t * BN;
		return live && j0 <= wq1 && !(window > 0 && j0 + BN - 1 < wq0 - window + 1);
	};

	// B(j): tile j's copies are waited for and visible to wgmma, every
	// thread is past its reads of the stages tile j+1 takes (file comment),
	// tile j+1's copies are issued.
	const auto block = [&](int j) {
		cp_async_wait0();  // this thread's copies of tile j (and the queries) are done
		asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // visible to wgmma (the async proxy)
		__syncthreads();
		if (j + 1 < ntiles) wg5_load_kv<HD, BN>(kst(j + 1), vst(j + 1), kc, vc, kv, kvh, (j + 1) * BN, kvEnd);
		cp_async_commit();
	};

	const auto arrive = [&](int t) {
		if (wg == 0) {
			wg3_bar_arrive(2);
		} else if (t < ntiles - 1) {
			wg3_bar_arrive(1);
		}
	};

	// X(t): masking and online softmax of S_t into the P buffer pn; a0,
	// a1: the factors O and the row sums take for the new maxima.
	const auto softmax = [&](int t, unsigned (&pn)[PS][4], float& a0, float& a1) {
		const int j0 = t * BN;
		const bool edge = j0 + BN - 1 > wq0 || (window > 0 && j0 < wq1 - window + 1);
		// S's accumulators are read, never rewritten: masked values are
		// formed on the fly (file comment, ptxas). s[4i+e]: row qa (e < 2)
		// or qa+8 (e ≥ 2), key j0 + 8i + 2tg + (e & 1).
		const auto sv = [&](int i, int e) {
			const int kp = j0 + i * 8 + 2 * tg + (e & 1), qp = qa + (e >> 1) * 8;
			return edge & ((kp > qp) | (kp < qp - wm)) ? -FT_INF : s[4 * i + e];
		};
		float mx0 = -FT_INF, mx1 = -FT_INF;
#pragma unroll
		for (int i = 0; i < BN / 8; i++) {
			mx0 = fmaxf(mx0, fmaxf(sv(i, 0), sv(i, 1)));
			mx1 = fmaxf(mx1, fmaxf(sv(i, 2), sv(i, 3)));
		}
		mx0 = fmaxf(mx0, __shfl_xor_sync(FT_FULL, mx0, 1));
		mx0 = fmaxf(mx0, __shfl_xor_sync(FT_FULL, mx0, 2));
		mx1 = fmaxf(mx1, __shfl_xor_sync(FT_FULL, mx1, 1));
		mx1 = fmaxf(mx1, __shfl_xor_sync(FT_FULL, mx1, 2));
		const float mn0 = fmaxf(m0, mx0 * scale_log2), mn1 = fmaxf(m1, mx1 * scale_log2);
		// A row that has seen no visible key yet stays at zero, not NaN.
		const float ms0 = mn0 == -FT_INF ? 0.f : mn0, ms1 = mn1 == -FT_INF ? 0.f : mn1;
		a0 = wg_ex2(m0 - ms0);
		a1 = wg_ex2(m1 - ms1);
		m0 = mn0;
		m1 = mn1;
		float rs0 = 0.f, rs1 = 0.f;
#pragma unroll
		for (int i = 0; i < BN / 8; i++) {
			const float p0 = wg_ex2(fmaf(sv(i, 0), scale_log2, -ms0));
			const float p1 = wg_ex2(fmaf(sv(i, 1), scale_log2, -ms0));
			const float p2 = wg_ex2(fmaf(sv(i, 2), scale_log2, -ms1));
			const float p3 = wg_ex2(fmaf(sv(i, 3), scale_log2, -ms1));
			rs0 += p0 + p1;
			rs1 += p2 + p3;
			pn[i >> 1][(i & 1) * 2 + 0] = pack_bf16(p0, p1);
			pn[i >> 1][(i & 1) * 2 + 1] = pack_bf16(p2, p3);
		}
		l0 = l0 * a0 + rs0;
		l1 = l1 * a1 + rs1;
	};

	// The warpgroup's turn on tile t in block step j with the products
	// doS (S_t) and doPV (the pending P·V), each a compile-time flag: issue,
	// let the other warpgroup go, wait for S, B(j) for warpgroup 1, X(t),
	// wait for the P·V, rescale O (file comment). One branch from fence to
	// last wait per combination.
	const auto turn = [&](int t, int j, auto doS, auto doPV, auto buf) {
		constexpr bool S = decltype(doS)::value, PV = decltype(doPV)::value;
		constexpr int B = decltype(buf)::value ? 1 : 0;  // the pending P·V's buffer
		constexpr int W = PV ? 1 - B : 0;                 // the buffer X(t) writes
		wg_pin<ON>(o);
		wg_fence();
		if constexpr (S) {
			const unsigned ks = kst(t);
#pragma unroll
			for (int kk = 0; kk < KS; kk++) {
				const unsigned qaddr = sQ + (kk >> 2) * (BM * 128) + wg * (64 * 128) + (kk & 3) * 32;
				const unsigned kaddr = ks + (kk >> 2) * (BN * 128) + (kk & 3) * 32;
				if (kk == 0) {
					wg5_ss0<BN>(s, wg_desc(qaddr, 16, 1024), wg_desc(kaddr, 16, 1024));
				} else {
					wg_ss<BN>(s, wg_desc(qaddr, 16, 1024), wg_desc(kaddr, 16, 1024), 1);
				}
			}
			wg_commit();
		}
		if constexpr (PV) {
#pragma unroll
			for (int kk = 0; kk < PS; kk++) wg_rs<HD>(o, pf[B][kk], wg_desc(pvs + kk * 2048, BN * 128, 1024));
			wg_commit();
		}
		arrive(t);
		if constexpr (S && PV) {
			wg5_wait1();  // S_t is done; the P·V stays in flight
		} else {
			wg_wait0();
		}
		if constexpr (S) wg_pin<SN>(s);
		if (wg == 1 && j < ntiles) block(j);
		if constexpr (S) {
			float a0, a1;
			softmax(t, pf[W], a0, a1);
			if constexpr (PV) {
				if (l0 + l1 < 0.f) __trap();  // never: a branch on the row sums keeps the exponentials before the wait
				wg_wait0();
				wg5_pin_pf<PS>(pf[B]);  // the P·V's operands stay live (and apart from pf[W]) until it is done
			}
			wg_pin<ON>(o);
			// O now holds every P·V up to the previous visible tile: it
			// takes the new maxima.
#pragma unroll
			for (int i = 0; i < HD / 8; i++) {
				o[4 * i + 0] *= a0;
				o[4 * i + 1] *= a0;
				o[4 * i + 2] *= a1;
				o[4 * i + 3] *= a1;
			}
			pending = true;
			pb = W;
			pvs = vst(t);
		} else {
			wg_pin<ON>(o);
			pending = false;
		}
	};
	const auto step = [&](int t, int j) {
		if (wg == 0) {
			if (t > jfirst) wg3_bar_sync(1);
		} else {
			wg3_bar_sync(2);
		}
		const bool vis = visible(t);
		if (vis && pending && pb == 0) {
			turn(t, j, wg3_flag<true>(), wg3_flag<true>(), wg3_flag<false>());
		} else if (vis && pending) {
			turn(t, j, wg3_flag<true>(), wg3_flag<true>(), wg3_flag<true>());
		} else if (vis) {
			turn(t, j, wg3_flag<true>(), wg3_flag<false>(), wg3_flag<false>());
		} else if (pending && pb == 0) {
			turn(t, j, wg3_flag<false>(), wg3_flag<true>(), wg3_flag<false>());
		} else if (pending) {
			turn(t, j, wg3_flag<false>(), wg3_flag<true>(), wg3_flag<true>());
		} else {
			arrive(t);
			if (wg == 1 && j < ntiles) block(j);
		}
	};

	// Block tile j: warpgroup 0 takes tile j after B(j), warpgroup 1 tile
	// j−1 around it (B(j) inside its turn); the extra step j = ntiles is
	// warpgroup 1's last tile.
	for (int j = jfirst; j <= ntiles; j++) {
		const int t = j - wg;                         // the warpgroup's tile of this step
		const bool mine = t >= jfirst && t < ntiles;  // warpgroup 0: j < ntiles; 1: j > jfirst
		if (wg == 0 && j < ntiles) block(j);
		if (mine) {
			step(t, j);
		} else if (wg == 1 && j < ntiles) {
			block(j);
		}
	}
	const auto lastPV = [&](const unsigned (&p)[PS][4]) {
		wg_pin<ON>(o);
		wg_fence();
#pragma unroll
		for (int kk = 0; kk < PS; kk++) wg_rs<HD>(o, p[kk], wg_desc(pvs + kk * 2048, BN * 128, 1024));
		wg_commit();
		wg_wait0();
		wg_pin<ON>(o);
	};
	if (pending && pb == 0) {  // the last P·V
		lastPV(pf[0]);
	} else if (pending) {
		lastPV(pf[1]);
	}
	cp_async_wait0();
	wg_store_out<HD>(o, l0, l1, sQ, wg, 3 + wg, warp, g, tg, wtid, w0, T, out, qs, h);
}

// attn_prefill_wg5_d128_bf16 is attn_prefill_wg3_d128_bf16 with the
// intra-warpgroup overlap (file comment): grid (H, ceil(T/128)), the last
// query tile first, 256 threads, WG_SMEM(128, 128, 3) bytes.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_prefill_wg5_d128_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	const wg_contig kv = {(usize)K * 128};
	prefill_wg5_body<128, 128>(out, q, kc, vc, T, H, blockIdx.x, blockIdx.x / (H / K), gridDim.y - 1 - blockIdx.y, ft_pos(posp, pos0),
		scale_log2, window, kv);
}

// attn_prefill_wg5_d64_bf16 is attn_prefill_wg5_d128_bf16 for head width
// 64, WG_SMEM(64, 128, 3) bytes.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_prefill_wg5_d64_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	const wg_contig kv = {(usize)K * 64};
	prefill_wg5_body<64, 128>(out, q, kc, vc, T, H, blockIdx.x, blockIdx.x / (H / K), gridDim.y - 1 - blockIdx.y, ft_pos(posp, pos0),
		scale_log2, window, kv);
}

// prefill_wg5_varlen is prefill_wg3_varlen with the intra-warpgroup
// overlap.
template <int HD>
__device__ __forceinline__ void prefill_wg5_varlen(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int H, int K,
		const int* tiles, const int* qStarts, const int* lens, const int* table, int maxBlocks, int bs, float scale_log2, int window) {
	const int h = blockIdx.x;
	const int seq = tiles[2 * blockIdx.y], qtile = tiles[2 * blockIdx.y + 1];
	const int q0 = qStarts[seq], T = qStarts[seq + 1] - q0;
	const usize qs = (usize)H * HD;
	const wg_paged kv = {table + (usize)seq * maxBlocks, bs, (usize)K * HD};
	prefill_wg5_body<HD, 128>(out + (usize)q0 * qs, q + (usize)q0 * qs, kc, vc, T, H, h, h / (H / K), qtile, lens[seq] - T, scale_log2,
		window, kv);
}

// attn_varlen_prefill_wg5_d128_bf16 is attn_varlen_prefill_wg3_d128_bf16
// with the intra-warpgroup overlap: tiles of 128 rows, 256 threads,
// WG_SMEM(128, 128, 3) bytes.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_prefill_wg5_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_wg5_varlen<128>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}

// attn_varlen_prefill_wg5_d64_bf16 is attn_varlen_prefill_wg5_d128_bf16
// for head width 64, WG_SMEM(64, 128, 3) bytes.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_prefill_wg5_d64_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_wg5_varlen<64>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
