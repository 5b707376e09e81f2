// Prefill attention on Hopper's warpgroup MMA (variant wg,
// FT_PREFILL_VARIANT=wg): wgmma.mma_async needs sm_90a, so this file is not
// part of Source() (compiled for sm_XY) but of SourceSM90a(), which the
// backend compiles as its own module on compute capability 9.0 only
// (kernels/cudabackend/prefillwg.go). Same arguments, math and results as
// the fa2 kernels (prefill_fa2.cu): causal (and optionally windowed)
// attention of T query rows at positions pos..pos+T−1 over the cache's
// positions 0..pos+T−1, several query heads per KV head.
//
// Layout: a block takes 128 query rows of one head with two warpgroups of
// 128 threads, each owning 64 rows (the M of wgmma's m64nNk16). Key and
// value tiles of WG_BN positions are copied with cp.async (rows past the
// sequence zero-filled) into shared memory in the 128-byte swizzled layout
// the wgmma descriptors describe, NS stages; the 128-row query tile stays
// in shared memory for the whole loop. Per tile each warpgroup computes
// S = Q·Kᵀ (A = queries and B = keys from shared memory, both K-major),
// masks the tiles that cross its diagonal or window start, runs the online
// softmax in registers (exp2 with the scale folded into one FFMA), converts
// the probabilities to the bf16 A fragments of O += P·V in registers, and
// multiplies by the values (B from shared memory, N-major: the transpose
// bit). Tiles no row of a warpgroup sees are skipped; blocks start with the
// query tiles that see the most keys. With three stages the P·V of a tile
// is not waited for until the S of the next one is (the load issued at
// tile j overwrites the stage of tile j−2, whose P·V every thread waited
// for during tile j−1), so it runs across the block barrier.
//
// Shared-memory layout (from a 1024-byte aligned base): the query tile,
// then per stage a key and a value tile. A tile of R rows of HD bf16 values
// is HD/64 column halves of R rows × 128 bytes; row r's 16-byte chunk c of
// a half sits at r·128 + ((c ^ (r mod 8))·16) (Swizzle<3,4,3>: the layout
// TMA's 128B swizzle writes and wgmma's 128B-swizzle descriptors read).

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "prefill_wg.cu needs sm_90a (wgmma)"
#endif

#define WG_BM 128  // query rows per block (two warpgroups × 64)
#define WG_NT 256  // threads per block

// wg_cp16 copies 16 bytes from global src to shared address dst
// asynchronously, or writes 16 zero bytes when valid is false (src is then
// not read but must be a mapped address).
__device__ __forceinline__ void wg_cp16(unsigned dst, const void* src, bool valid) {
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

// wg_desc is the wgmma shared-memory matrix descriptor of the operand at
// shared address addr in the 128-byte swizzled layout: start address >> 4
// in bits 0–13, leading byte offset >> 4 in bits 16–29, stride byte offset
// >> 4 in bits 32–45, base offset 0 (the swizzle atoms are 1024-byte
// aligned), layout type 1 (128B swizzle) in bits 62–63.
__device__ __forceinline__ unsigned long long wg_desc(unsigned addr, unsigned lbo, unsigned sbo) {
	return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)((lbo >> 4) & 0x3FFF) << 16) |
	       ((unsigned long long)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }

// wg_pin keeps the compiler from moving the n accumulator registers r
// across the wgmma fence, issue and wait (an empty asm that "writes" them).
template <int N>
__device__ __forceinline__ void wg_pin(float* r) {
#pragma unroll
	for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}

#define WG_F8(d, i) \
	"+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define WG_R32                                                                                                                  \
	"{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, " \
	"%26, %27, %28, %29, %30, %31}"
#define WG_R64                                                                                                                  \
	"{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, " \
	"%26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, "  \
	"%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// wg_ss<N> is d (+)= A·B for the m64nNk16 bf16 wgmma with A and B from
// shared memory (descriptors da, db, both K-major); acc false overwrites d.
// d is this thread's N/2 fp32 accumulators (the wgmma D fragment).
template <int N>
__device__ __forceinline__ void wg_ss(float* d, unsigned long long da, unsigned long long db, int acc);
template <>
__device__ __forceinline__ void wg_ss<64>(float* d, unsigned long long da, unsigned long long db, int acc) {
	asm volatile(
		"{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
		"wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_R32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
		: WG_F8(d, 0), WG_F8(d, 8), WG_F8(d, 16), WG_F8(d, 24)
		: "l"(da), "l"(db), "r"(acc));
}
template <>
__device__ __forceinline__ void wg_ss<128>(float* d, unsigned long long da, unsigned long long db, int acc) {
	asm volatile(
		"{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
		"wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_R64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
		: WG_F8(d, 0), WG_F8(d, 8), WG_F8(d, 16), WG_F8(d, 24), WG_F8(d, 32), WG_F8(d, 40), WG_F8(d, 48), WG_F8(d, 56)
		: "l"(da), "l"(db), "r"(acc));
}

// wg_rs<N> is d += A·B for the m64nNk16 bf16 wgmma with A from registers
// (a: the A fragment, four bf16 pairs) and B from shared memory (db,
// N-major: transpose bit set).
template <int N>
__device__ __forceinline__ void wg_rs(float* d, const unsigned* a, unsigned long long db);
template <>
__device__ __forceinline__ void wg_rs<64>(float* d, const unsigned* a, unsigned long long db) {
	asm volatile(
		"wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_R32 ", {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
		: WG_F8(d, 0), WG_F8(d, 8), WG_F8(d, 16), WG_F8(d, 24)
		: "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
template <>
__device__ __forceinline__ void wg_rs<128>(float* d, const unsigned* a, unsigned long long db) {
	asm volatile(
		"wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_R64 ", {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
		: WG_F8(d, 0), WG_F8(d, 8), WG_F8(d, 16), WG_F8(d, 24), WG_F8(d, 32), WG_F8(d, 40), WG_F8(d, 48), WG_F8(d, 56)
		: "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

// wg_ex2 is 2^x (ex2.approx, ftz; 2^−∞ = 0).
__device__ __forceinline__ float wg_ex2(float x) {
	float r;
	asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
	return r;
}

// wg_contig: position p of a contiguous cache [C,K,d] is row p.
struct wg_contig {
	usize rs;  // elements between positions
	__device__ __forceinline__ usize row(int p) const { return (usize)p * rs; }
};

// wg_paged: position p of a sequence in a paged pool is row
// tab[p/bs]·bs + p mod bs.
struct wg_paged {
	const int* tab;
	int bs;
	usize rs;
	__device__ __forceinline__ usize row(int p) const { return ((usize)tab[p / bs] * bs + (usize)(p % bs)) * rs; }
};

// wg_swz is the byte offset of row r's 16-byte chunk c in a swizzled tile
// of R rows (module comment).
template <int R>
__device__ __forceinline__ unsigned wg_swz(int r, int c) {
	return (unsigned)((c >> 3) * R * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// wg_load_kv issues the async copies of the keys and values of the BN
// positions from j0 of KV head kvh into the stage at shared address st (key
// tile, then value tile); rows at or past kvEnd are zero-filled. Every row
// address is computed before the first copy, so a paged pool's table reads
// overlap.
template <int HD, int BN, class KV>
__device__ __forceinline__ void wg_load_kv(unsigned st, const bf16_t* kc, const bf16_t* vc, const KV& kv, int kvh, int j0, int kvEnd) {
	constexpr int CPR = HD / 8, RPP = WG_NT / CPR, NP = BN / RPP, TILE = BN * HD * 2;
	const int cr = threadIdx.x / CPR, cc = threadIdx.x % CPR;
	usize off[NP];
#pragma unroll
	for (int i = 0; i < NP; i++) {
		const int p = j0 + cr + i * RPP;
		off[i] = p < kvEnd ? kv.row(p) + (usize)kvh * HD + cc * 8 : 0;
	}
	const unsigned d = st + wg_swz<BN>(cr, cc);  // rows cr + i·RPP keep cr's swizzle (RPP is a multiple of 8)
#pragma unroll
	for (int i = 0; i < NP; i++) {
		const bool ok = j0 + cr + i * RPP < kvEnd;
		wg_cp16(d + i * RPP * 128, kc + off[i], ok);
		wg_cp16(d + TILE + i * RPP * 128, vc + off[i], ok);
	}
}

// WG_SMEM is the dynamic shared memory of the wg kernel of head width HD
// with BN-position tiles in NS stages: 1024 bytes of alignment slack, the
// 128-row query tile and NS stages of a key and a value tile
// (prefillVariant.smem on the Go side).
#define WG_SMEM(HD, BN, NS) (1024 + WG_BM * (HD) * 2 + (NS) * 2 * (BN) * (HD) * 2)

// wg_load_q starts the cp.async copies of the block's 128-row query tile
// (rows b0.. of q, head h, rows qs elements apart) into shared memory at sQ
// in wg_swz order, rows past T zero; the caller commits the group.
template <int HD>
__device__ __forceinline__ void wg_load_q(unsigned sQ, const bf16_t* q, int h, int b0, int T, usize qs, int tid) {
	constexpr int BM = WG_BM, CPR = HD / 8, RPP = WG_NT / CPR;
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

// wg_store_out finishes a warpgroup's 64 query rows (slot 0 or 1 of the
// 128-row tile, rows w0.. of out, T rows in all): the row sums l0, l1 of
// this thread's two rows are completed across the quad, the accumulators
// o normalised into the slot's rows of the query tile in shared memory at
// sQ (its last wgmma that read them is done; no other warpgroup reads
// them), named barrier bar (128 threads) waits for the whole slot, then
// the rows go out in 16-byte stores.
template <int HD>
__device__ __forceinline__ void wg_store_out(const float* o, float l0, float l1, unsigned sQ, int slot, int bar, int warp, int g,
		int tg, int wtid, int w0, int T, bf16_t* out, usize qs, int h) {
	constexpr int BM = WG_BM, CPR = HD / 8;
	l0 += __shfl_xor_sync(FT_FULL, l0, 1);
	l0 += __shfl_xor_sync(FT_FULL, l0, 2);
	l1 += __shfl_xor_sync(FT_FULL, l1, 1);
	l1 += __shfl_xor_sync(FT_FULL, l1, 2);
	const float i0 = l0 > 0.f ? 1.f / l0 : 0.f, i1 = l1 > 0.f ? 1.f / l1 : 0.f;
	const int ra = slot * 64 + warp * 16 + g;  // this thread's first row in the tile
#pragma unroll
	for (int i = 0; i < HD / 8; i++) {
		asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sQ + wg_swz<BM>(ra, i) + tg * 4), "r"(pack_bf16(o[4 * i] * i0, o[4 * i + 1] * i0))
			: "memory");
		asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sQ + wg_swz<BM>(ra + 8, i) + tg * 4),
			"r"(pack_bf16(o[4 * i + 2] * i1, o[4 * i + 3] * i1))
			: "memory");
	}
	asm volatile("bar.sync %0, 128;\n" ::"r"(bar) : "memory");  // the slot's rows are all written
#pragma unroll
	for (int i = 0; i < 64 * CPR / 128; i++) {
		const int c = i * 128 + wtid, r = c / CPR, cc = c % CPR;
		uint4 v;
		asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
			: "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(sQ + wg_swz<BM>(slot * 64 + r, cc)) : "memory");
		if (w0 + r < T) *(uint4*)(out + (usize)(w0 + r) * qs + (usize)h * HD + cc * 8) = v;
	}
}

// prefill_wg_body computes query tile qtile (rows qtile·128.. of q and out,
// T rows in all, at positions pos..pos+T−1) of head h over KV head kvh, as
// prefill_fa2_body. q and out point at the sequence's first row; rows are
// H·HD apart and 16-byte aligned.
template <int HD, int BN, int NS, class KV>
__device__ __forceinline__ void prefill_wg_body(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int T, int H,
		int h, int kvh, int qtile, int pos, float scale_log2, int window, const KV& kv) {
	constexpr int BM = WG_BM;
	constexpr int QT = BM * HD * 2;              // bytes of the query tile
	constexpr int TILE = BN * HD * 2;            // bytes of a key or value tile
	constexpr int KS = HD / 16;                  // k-steps of S = Q·Kᵀ
	constexpr int PS = BN / 16;                  // k-steps of O += P·V
	constexpr int SN = BN / 2, ON = HD / 2;      // accumulators per thread of S and O
	static_assert(NS == 2 || NS == 3, "two or three stages");
	extern __shared__ __attribute__((aligned(1024))) unsigned char prefill_wg_sm[];
	const unsigned sQ = (smem_u32(prefill_wg_sm) + 1023) & ~1023u, sKV = sQ + QT;
	const int tid = threadIdx.x, wg = tid >> 7, wtid = tid & 127, warp = wtid >> 5, lane = tid & 31;
	const int g = lane >> 2, tg = lane & 3;
	const int b0 = qtile * BM;      // the block's first row
	const int w0 = b0 + wg * 64;    // the warpgroup's first row
	const usize qs = (usize)H * HD;  // elements between tokens of q and out

	const int lastRow = min(T, b0 + BM) - 1;
	const int kvEnd = pos + lastRow + 1;
	const int ntiles = (kvEnd + BN - 1) / BN;
	const int jfirst = window > 0 ? max(0, pos + b0 - window + 1) / BN : 0;
	const bool live = w0 < T;
	const int wq0 = pos + w0, wq1 = pos + min(T, w0 + 64) - 1;  // the warpgroup's query positions
	const int qa = pos + w0 + warp * 16 + g;                     // position of this thread's first row (the second is +8)
	const int wm = window > 0 ? window - 1 : 1 << 30;            // a key at kp is visible to qp when qp−wm ≤ kp ≤ qp

	wg_load_q<HD>(sQ, q, h, b0, T, qs, tid);  // the query tile (its own group)
	cp_async_commit();
	wg_load_kv<HD, BN>(sKV, kc, vc, kv, kvh, jfirst * BN, kvEnd);
	cp_async_commit();

	float o[ON];
#pragma unroll
	for (int i = 0; i < ON; i++) o[i] = 0.f;
	float m0 = -FT_INF, m1 = -FT_INF, l0 = 0.f, l1 = 0.f;  // running maxima (scaled) and this thread's share of the row sums

	for (int j = jfirst; j < ntiles; j++) {
		const unsigned st = sKV + ((j - jfirst) % NS) * (2 * TILE);
		cp_async_wait0();  // this thread's copies of tile j (and the queries) are done
		asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // visible to wgmma (the async proxy)
		__syncthreads();  // everyone's are, and both warpgroups are done with the stage of tile j+1−NS
		if (j + 1 < ntiles) wg_load_kv<HD, BN>(sKV + ((j + 1 - jfirst) % NS) * (2 * TILE), kc, vc, kv, kvh, (j + 1) * BN, kvEnd);
		cp_async_commit();
		const int j0 = j * BN;
		// Warpgroup-uniform: does any of its queries see a key of the tile,
		// and does any key need a mask?
		if (!live || j0 > wq1 || (window > 0 && j0 + BN - 1 < wq0 - window + 1)) {
			wg_wait0();  // an earlier tile's P·V (its stage is loaded next)
			continue;
		}
		const bool edge = j0 + BN - 1 > wq0 || (window > 0 && j0 < wq1 - window + 1);

		// S = Q·Kᵀ: K-major A (this warpgroup's 64 query rows) and B (the
		// BN keys); a k-step of 16 dimensions is 32 bytes into a 128-byte
		// row, the next 64 dimensions the next half of the tile.
		float s[SN];
		wg_fence();
#pragma unroll
		for (int kk = 0; kk < KS; kk++) {
			const unsigned qaddr = sQ + (kk >> 2) * (BM * 128) + wg * (64 * 128) + (kk & 3) * 32;
			const unsigned kaddr = st + (kk >> 2) * (BN * 128) + (kk & 3) * 32;
			wg_ss<BN>(s, wg_desc(qaddr, 16, 1024), wg_desc(kaddr, 16, 1024), kk > 0);
		}
		wg_commit();
		wg_wait0();  // S, and the previous tile's P·V
		wg_pin<SN>(s);
		wg_pin<ON>(o);

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
		// Online softmax in base 2 (the quad of lanes sharing a row reduces
		// with two shuffles); P packed to the A fragments of P·V.
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
		unsigned pf[PS][4];  // A fragment of k-step kk: keys 16kk.. (S column blocks 2kk, 2kk+1)
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
#pragma unroll
		for (int i = 0; i < HD / 8; i++) {
			o[4 * i + 0] *= a0;
			o[4 * i + 1] *= a0;
			o[4 * i + 2] *= a1;
			o[4 * i + 3] *= a1;
		}

		// O += P·V: B = values, [keys][dims] rows, N-major; a k-step is 16
		// keys (two 8-row groups 1024 bytes apart), the dimension halves
		// TILE/2 apart.
		wg_pin<ON>(o);
		wg_fence();
#pragma unroll
		for (int kk = 0; kk < PS; kk++) wg_rs<HD>(o, pf[kk], wg_desc(st + TILE + kk * 2048, BN * 128, 1024));
		wg_commit();
		if (NS == 2) wg_wait0();  // else waited for with the next S (module comment)
	}
	wg_wait0();
	wg_pin<ON>(o);
	cp_async_wait0();
	wg_store_out<HD>(o, l0, l1, sQ, wg, 1 + wg, warp, g, tg, wtid, w0, T, out, qs, h);
}

// prefill_wg_contig: grid (H, ceil(T/128)), the last query tile first.
template <int HD, int BN, int NS>
__device__ __forceinline__ void prefill_wg_contig(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int T, int H,
		int K, const int* posp, int pos0, float scale_log2, int window) {
	const int h = blockIdx.x;
	const wg_contig kv = {(usize)K * HD};
	prefill_wg_body<HD, BN, NS>(out, q, kc, vc, T, H, h, h / (H / K), gridDim.y - 1 - blockIdx.y, ft_pos(posp, pos0), scale_log2, window,
		kv);
}

// prefill_wg_varlen: grid (H, tiles), tile blockIdx.y of the (sequence,
// query tile) list.
template <int HD, int BN, int NS>
__device__ __forceinline__ void prefill_wg_varlen(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int H, int K,
		const int* tiles, const int* qStarts, const int* lens, const int* table, int maxBlocks, int bs, float scale_log2, int window) {
	const int h = blockIdx.x;
	const int seq = tiles[2 * blockIdx.y], qtile = tiles[2 * blockIdx.y + 1];
	const int q0 = qStarts[seq], T = qStarts[seq + 1] - q0;
	const usize qs = (usize)H * HD;
	const wg_paged kv = {table + (usize)seq * maxBlocks, bs, (usize)K * HD};
	prefill_wg_body<HD, BN, NS>(out + (usize)q0 * qs, q + (usize)q0 * qs, kc, vc, T, H, h, h / (H / K), qtile, lens[seq] - T, scale_log2,
		window, kv);
}

// attn_prefill_wg_d128_bf16 is attn_prefill_fa2_d128_bf16 on warpgroup MMA
// (above): grid (H, ceil(T/128)), 256 threads, WG_SMEM(128, 128, 3) bytes.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_prefill_wg_d128_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_wg_contig<128, 128, 3>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}

// attn_prefill_wg_d64_bf16 is attn_prefill_wg_d128_bf16 for head width 64,
// WG_SMEM(64, 128, 3) bytes.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_prefill_wg_d64_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_wg_contig<64, 128, 3>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}

// attn_varlen_prefill_wg_d128_bf16 is attn_varlen_prefill_fa2_d128_bf16 on
// warpgroup MMA: tiles of 128 rows, 256 threads, WG_SMEM(128, 128, 3) bytes.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_prefill_wg_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_wg_varlen<128, 128, 3>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}

// attn_varlen_prefill_wg_d64_bf16 is attn_varlen_prefill_wg_d128_bf16 for
// head width 64, WG_SMEM(64, 128, 3) bytes.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_prefill_wg_d64_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_wg_varlen<64, 128, 3>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
