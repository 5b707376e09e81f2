// Our own wgmma GEMM with fused epilogues (kernels/cudabackend/
// gemmfused.go), for forwards of many rows where a library GEMM would
// write its products to memory only for the next kernel to read them back:
//  - gemm_swiglu_tma_bf16 (on by default, FT_SWIGLU_GEMM=0 off): the gated
//    MLP's first half, out[M,N] = silu(x·gᵀ)·(x·uᵀ) for x [M,K], the gate
//    and up weights g, u [N,K]; the separate path writes the two products
//    [M,2N] in bf16 and reads them back for the silu·mul (at 64 × 512
//    tokens of Llama-3-8B 23 ms of a 720 ms forward, all of it memory
//    traffic); gemm_swiglu_bf16 is the same with the stores from registers
//    (FT_SWIGLU_GEMM=regs, and where the output is not 16-byte aligned);
//  - gemm_qkv_rope_tma_bf16 (FT_QKV_GEMM=1; off by default: with stores
//    from registers it measured slower than the separate kernels, s23f,
//    through shared memory and TMA as fast, s37b): the attention input, q, k, v =
//    x·[wq; wk; wv]ᵀ in one GEMM whose epilogue applies RoPE to q and k and
//    stores k and v into the KV cache, in place of three GEMMs and the RoPE
//    + store kernel.
// All bf16 row-major (K contiguous), fp32 accumulation; the products stay
// in registers until the epilogue.
//
// Layout: a persistent grid (a block an SM) walks tiles of 128 rows of x
// times 256 weight rows (one m64n256k16 wgmma a k16 step and consumer;
// for the MLP the tile's 128 gate rows then its 128 up rows, so that a
// thread holds the gate and the up product of the same outputs as
// accumulators i and i + 64). Three warpgroups (384 threads):
//  - warpgroup 0, the producer, keeps 40 registers; one thread copies each
//    k-step's x box (128 × 64) and two weight boxes (128 × 64 each) by TMA
//    into one of GS_NS stages (48 KiB each, the 128-byte swizzle the
//    descriptors read), completing on the stage's "full" mbarrier, after
//    waiting for the stage's "empty" one;
//  - warpgroups 1 and 2, the consumers (232 registers), own 64 rows of the
//    tile each: per k-step four wgmmas (A = their x rows, B = the 256 weight
//    rows, both K-major from shared memory), one group in flight, the stage
//    of the previous k-step released once its group is done (one arrival a
//    consumer on "empty"); after the last k-step the op's epilogue
//    (gs_swiglu_tma, gs_qkv_tma: into shared memory past the stages, then
//    TMA bulk stores that leave while the consumers go on to the next
//    tile's products; gs_swiglu: bf16 pairs from the registers),
//    while the producer already fills the stages of the tile that follows.
// Tiles are taken in groups of GS_GM row tiles, column tile outer within a
// group, so that the ~132 tiles in flight share ~16 row tiles of x and ~8
// column tiles of the weights in L2. Rows of x past M are read as zeros
// (the map's bounds) and not stored. K must be a multiple of 64, the
// weight rows of a column tile whole (the backend checks).

#define GS_NT 384     // threads: the producer and two consumer warpgroups
#define GS_BM 128     // output rows a tile
#define GS_BN 256     // weight rows a tile
#define GS_BK 64      // k a stage (128 bytes of bf16: the swizzle's row)
#define GS_NS 4       // stages
#ifndef GS_GM           // the backend defines it ahead of the file for FT_FUSED_GROUP (A/B runs)
#define GS_GM 16      // row tiles a group of the tile order
#endif
#define GS_ABYTES (GS_BM * GS_BK * 2)          // 16 KiB of x a stage
#define GS_BBYTES (GS_BN * GS_BK * 2)          // 32 KiB of weights a stage
#define GS_STAGE (GS_ABYTES + GS_BBYTES)       // 48 KiB
#define GS_SMEM (1024 + GS_NS * GS_STAGE)      // dynamic shared memory, with the 1024-byte alignment
#define GS_SMEM_TMA (GS_SMEM + 2 * 16384)      // and the two consumers' output tiles (the _tma kernels)

// gs_tmap is a CUtensorMap (runtime/cuda/tmap.go); the gs_*_maps the maps
// the kernels take as their last, __grid_constant__ parameter.
struct __align__(64) gs_tmap {
	unsigned long long w[16];
};
struct gs_swiglu_maps {
	gs_tmap x, g, u;
};
// gs_swiglu_tma_maps adds the output's map (boxes of 64 rows × 64 columns,
// the 128-byte swizzle) for gemm_swiglu_tma_bf16's stores.
struct gs_swiglu_tma_maps {
	gs_tmap x, g, u, o;
};
// gs_qkv_tma_maps are x's, the weights' and the outputs q, k, v's (boxes
// of 64 rows × 64 columns, the 128-byte swizzle) for
// gemm_qkv_rope_tma_bf16.
struct gs_qkv_tma_maps {
	gs_tmap x, q, k, v, oq, ok, ov;
};

__device__ __forceinline__ void gs_mbar_init(unsigned bar, unsigned count) {
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// gs_mbar_wait waits until the phase of parity ph of the mbarrier at bar
// has completed (parity 1 on a new barrier: at once).
__device__ __forceinline__ void gs_mbar_wait(unsigned bar, unsigned ph) {
	unsigned done;
	do {
		asm volatile(
			"{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
			: "=r"(done)
			: "r"(bar), "r"(ph)
			: "memory");
	} while (!done);
}

__device__ __forceinline__ void gs_mbar_arrive(unsigned bar) {
	asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}

// gs_expect is the producer's arrival announcing bytes of TMA copies that
// complete the barrier's phase.
__device__ __forceinline__ void gs_expect(unsigned bar, unsigned bytes) {
	asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar), "r"(bytes) : "memory");
}

// gs_tma copies the box of map at column x, row y into shared memory at dst
// (1024-byte aligned), its bytes completing on the mbarrier at bar.
__device__ __forceinline__ void gs_tma(unsigned dst, const gs_tmap* map, int x, int y, unsigned bar) {
	asm volatile(
		"cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
		"l"(map), "r"(x), "r"(y), "r"(bar)
		: "memory");
}

__device__ __forceinline__ void gs_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }

#define GS_F8(d, i) \
	"+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define GS_F64(d, i) GS_F8(d, i), GS_F8(d, i + 8), GS_F8(d, i + 16), GS_F8(d, i + 24), GS_F8(d, i + 32), GS_F8(d, i + 40), \
	GS_F8(d, i + 48), GS_F8(d, i + 56)

// gs_mma is d (+)= A·B for the m64n256k16 bf16 wgmma, A and B from shared
// memory (descriptors da, db, both K-major); acc false overwrites d.
__device__ __forceinline__ void gs_mma(float* d, unsigned long long da, unsigned long long db, int acc) {
	asm volatile(
		"{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
		"wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
		"%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
		"%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
		"%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
		"%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
		"%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
		"%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
		"%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
		"%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
		"%128, %129, p, 1, 1, 0, 0;\n}\n"
		: GS_F64(d, 0), GS_F64(d, 64)
		: "l"(da), "l"(db), "r"(acc));
}

// gs_ep is what an op's epilogue knows of its place: the rows M of x, the
// tile's first row m0 and column tile c, the consumer cw (0, 1: rows
// 64cw.. of the tile), the thread's warp in it, its lane's row g (0..7)
// and column pair tg (0..3) of the accumulator layout, and ob, the shared
// memory past the stages (gemm_swiglu_tma_bf16's output tile).
struct gs_ep {
	int M, m0, c, cw, warp, g, tg;
	unsigned ob;
	// row0 is the tile row of the thread's accumulators 4j, 4j + 1 (those
	// of 4j + 2, 4j + 3 are 8 rows below).
	__device__ __forceinline__ int row0() const { return m0 + cw * 64 + warp * 16 + g; }
	// tid is the thread's index in its consumer warpgroup (0..127).
	__device__ __forceinline__ int tid() const { return warp * 32 + g * 4 + tg; }
	// lead is the one thread of the consumer that issues its bulk stores.
	__device__ __forceinline__ bool lead() const { return warp == 0 && g == 0 && tg == 0; }
};

// gs_tile maps tile index t to its first output row m0 and column tile c:
// groups of GS_GM row tiles, the column tile outer within a group.
__device__ __forceinline__ void gs_tile(int t, int mt, int nt, int& m0, int& c) {
	const int per = GS_GM * nt;
	const int grp = t / per, r = t - grp * per;
	const int mf = grp * GS_GM, gm = min(GS_GM, mt - mf);
	m0 = (mf + r % gm) * GS_BM;
	c = r / gm;
}

// gs_silu_mul is g·σ(g)·u with σ(g) = 1/(1+e^−g) = (1 + tanh(g/2))/2:
// one MUFU.TANH (tanh.approx, relative error ~2⁻¹¹, below the bf16 output's
// 2⁻⁸) and three FMUL/FFMA, where expf and an IEEE division cost the
// epilogue, which the tensor cores wait for, several times that.
__device__ __forceinline__ float gs_silu_mul(float g, float u) {
	const float h = 0.5f * g;
	float t;
	asm("tanh.approx.f32 %0, %1;\n" : "=f"(t) : "f"(h));
	return fmaf(h, t, h) * u;
}

// gs_swiglu is the gated MLP's op for gs_gemm: column tile c is outputs
// 128c.. of out [M,N], from gate rows 128c.. then up rows 128c.. .
struct gs_swiglu {
	bf16_t* out;
	int N;
	const gs_tmap *g, *u;
	__device__ __forceinline__ int cols() const { return N / 128; }
	// load copies k-step k of column tile c's 256 weight rows to sb.
	__device__ __forceinline__ void load(unsigned sb, int k, int c, unsigned full) const {
		gs_tma(sb, g, k * GS_BK, c * 128, full);
		gs_tma(sb + GS_BBYTES / 2, u, k * GS_BK, c * 128, full);
	}
	// store is the epilogue of this thread's rows r0 and r0 + 8 (below M)
	// of column tile c: accumulator 4j + 2h + e holds row r0 + 8h, column
	// 8j + 2·tg + e of the 256 products: gate for j < 16, up of the same
	// output for j + 16.
	__device__ __forceinline__ void store(const float (&d)[128], const gs_ep& e) const {
		const int r0 = e.row0(), M = e.M, c = e.c, tg = e.tg;
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const int r = r0 + 8 * h;
			if (r >= M) continue;
			bf16_t* o = out + (usize)r * N + c * 128 + 2 * tg;
#pragma unroll
			for (int j = 0; j < 16; j++) {
				const int i = 4 * j + 2 * h;
				*(unsigned*)(o + 8 * j) = pack_bf16(gs_silu_mul(d[i], d[i + 64]), gs_silu_mul(d[i + 1], d[i + 65]));
			}
		}
	}
	__device__ __forceinline__ void finish(const gs_ep&) const {}
};

// gs_bar_sync waits at named barrier id (1, 2: a consumer warpgroup's own)
// for its 128 threads.
__device__ __forceinline__ void gs_bar_sync(int id) { asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory"); }

// gs_stage_begin: before a consumer writes its 16 KiB staging area past
// the stages, its previous bulk stores have read it (the consumer's lead
// thread waits, the consumer's 128 threads meet).
__device__ __forceinline__ void gs_stage_begin(const gs_ep& e) {
	if (e.lead()) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
	gs_bar_sync(1 + e.cw);
}

// gs_stage_store: once every thread of the consumer has written its
// staging area ob (two boxes of 64 columns, 8 KiB apart), its lead thread
// stores the boxes by TMA through map m at columns x.. and x + 64.., rows
// y.., as one bulk group.
__device__ __forceinline__ void gs_stage_store(const gs_ep& e, const gs_tmap* m, unsigned ob, int x, int y) {
	asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
	gs_bar_sync(1 + e.cw);
	if (e.lead()) {
#pragma unroll
		for (int b = 0; b < 2; b++)
			asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(m), "r"(x + b * 64), "r"(y),
					"r"(ob + (unsigned)b * 8192u)
					: "memory");
		asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
	}
}

// gs_swiglu_tma is gs_swiglu with the outputs stored by TMA
// (FT_SWIGLU_GEMM=tma): each consumer writes its 64 × 128 outputs into its
// 16 KiB past the stages (two boxes of 64 columns, the 128-byte swizzle:
// a warp's 4-byte writes fall in 32 banks), and one thread of it issues
// the two boxes' bulk stores, which leave while the consumers go on to the
// next tile's products. Rows past M are not stored (the map's bounds). A
// consumer's next epilogue first waits until its stores have read the
// shared memory (cp.async.bulk.wait_group.read).
struct gs_swiglu_tma {
	gs_swiglu s;
	const gs_tmap* o;
	__device__ __forceinline__ int cols() const { return s.cols(); }
	__device__ __forceinline__ void load(unsigned sb, int k, int c, unsigned full) const { s.load(sb, k, c, full); }
	__device__ __forceinline__ void store(const float (&d)[128], const gs_ep& e) const {
		const unsigned ob = e.ob + (unsigned)e.cw * 16384u;
		gs_stage_begin(e);
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const int rl = e.warp * 16 + e.g + 8 * h;  // row in the consumer's 64; rl mod 8 = g
#pragma unroll
			for (int j = 0; j < 16; j++) {
				const int i = 4 * j + 2 * h;
				const unsigned w = pack_bf16(gs_silu_mul(d[i], d[i + 64]), gs_silu_mul(d[i + 1], d[i + 65]));
				const unsigned a = ob + (unsigned)(j >> 3) * 8192u + (unsigned)rl * 128u + (unsigned)(((j & 7) ^ e.g) * 16 + 4 * e.tg);
				asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(a), "r"(w) : "memory");
			}
		}
		gs_stage_store(e, o, ob, e.c * 128, e.m0 + e.cw * 64);
	}
	// finish waits for the consumer's last stores before the block exits.
	__device__ __forceinline__ void finish(const gs_ep& e) const {
		if (e.lead()) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
	}
};

// gs_qkv is what the attention input's op (gs_qkv_tma) reads and copies
// (head width 128): the q, k and v weights are one matrix of
// (H + 2·KV)·128 rows, column tile c its rows 256c.. (two heads of one of
// them: H and KV are even). q and k are rotated (RoPE: the pair i, i + 64
// of a head, which one thread holds as accumulators 4j and 4(j + 8)) with
// cos and sin of position·θ_i from the table cs [positions, 64] (float2,
// computed as the separate RoPE kernels compute them); k and v also go
// into the cache: row ps[2r + 1] of kc, vc for row r at position ps[2r],
// or without ps row and position pos0 + r (below cap). (q, k, v [M,·]
// themselves are written through gs_qkv_tma's output maps.)
struct gs_qkv {
	bf16_t *kc, *vc;
	const int* ps;
	int pos0, cap;
	const float2* cs;
	int H, KV;
	const gs_tmap *wq, *wk, *wv;
	__device__ __forceinline__ int cols() const { return (H + 2 * KV) / 2; }
	__device__ __forceinline__ void load(unsigned sb, int kk, int c, unsigned full) const {
		const int n0 = c * 256, nq = H * 128, nk = KV * 128;
		const gs_tmap* m = n0 < nq ? wq : (n0 < nq + nk ? wk : wv);
		const int r = n0 < nq ? n0 : (n0 < nq + nk ? n0 - nq : n0 - nq - nk);
		gs_tma(sb, m, kk * GS_BK, r, full);
		gs_tma(sb + GS_BBYTES / 2, m, kk * GS_BK, r + 128, full);
	}
};

// gs_qkv_tma is the attention input's op for gs_gemm (FT_QKV_GEMM=1),
// storing through shared memory a head of the tile at a time: each
// consumer writes its 64 rows of the head (q and k rotated; 128 columns,
// two boxes of 64 in its 16 KiB past the stages, the 128-byte swizzle as
// gs_swiglu_tma), one thread of it stores
// the boxes by TMA into q, k or v (maps oq, ok, ov; rows past M clipped by
// the map), and for k and v the consumer's threads copy the rows from
// shared memory into their cache rows, 16 bytes a lane (a row's 256 bytes
// by 16 lanes). Before a head's writes the consumer waits until its
// previous bulk stores have read the shared memory.
struct gs_qkv_tma {
	gs_qkv s;
	const gs_tmap *oq, *ok, *ov;
	__device__ __forceinline__ int cols() const { return s.cols(); }
	__device__ __forceinline__ void load(unsigned sb, int kk, int c, unsigned full) const { s.load(sb, kk, c, full); }
	__device__ __forceinline__ void store(const float (&d)[128], const gs_ep& e) const {
		const int M = e.M, n0 = e.c * 256, nq = s.H * 128, nk = s.KV * 128;
		const int reg = n0 < nq ? 0 : (n0 < nq + nk ? 1 : 2);  // q, k, v
		const int col0 = n0 - (reg == 0 ? 0 : (reg == 1 ? nq : nq + nk));
		const gs_tmap* om = reg == 0 ? oq : (reg == 1 ? ok : ov);
		bf16_t* cache = reg == 0 ? nullptr : (reg == 1 ? s.kc : s.vc);
		const unsigned ob = e.ob + (unsigned)e.cw * 16384u;
		const int rt = e.m0 + e.cw * 64;  // the consumer's first row
		int p[2];                          // the positions of the thread's rows (0 past M: not stored)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const int r = e.row0() + 8 * h;
			p[h] = r < M ? (s.ps ? s.ps[2 * r] : s.pos0 + r) : 0;
		}
#pragma unroll
		for (int hh = 0; hh < 2; hh++) {
			gs_stage_begin(e);
#pragma unroll
			for (int h = 0; h < 2; h++) {
				const int rl = e.warp * 16 + e.g + 8 * h;  // row in the consumer's 64; rl mod 8 = g
				const unsigned row = ob + (unsigned)rl * 128u + 4u * (unsigned)e.tg;
				if (reg == 2) {
#pragma unroll
					for (int j = 0; j < 16; j++) {
						const int i = 4 * (16 * hh + j) + 2 * h;
						const unsigned a = row + (unsigned)(j >> 3) * 8192u + (unsigned)(((j & 7) ^ e.g) * 16);
						asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(a), "r"(pack_bf16(d[i], d[i + 1])) : "memory");
					}
					continue;
				}
				const float2* cp = s.cs + (usize)p[h] * 64 + 2 * e.tg;
#pragma unroll
				for (int j = 0; j < 8; j++) {
					const float4 t = *(const float4*)(cp + 8 * j);  // cos, sin of i = 8j + 2tg and i + 1
					const int ia = 4 * (16 * hh + j) + 2 * h, ib = ia + 32;
					const float a0 = d[ia], a1 = d[ia + 1], b0 = d[ib], b1 = d[ib + 1];
					const unsigned x = pack_bf16(__fsub_rn(__fmul_rn(a0, t.x), __fmul_rn(b0, t.y)), __fsub_rn(__fmul_rn(a1, t.z), __fmul_rn(b1, t.w)));
					const unsigned y = pack_bf16(__fadd_rn(__fmul_rn(b0, t.x), __fmul_rn(a0, t.y)), __fadd_rn(__fmul_rn(b1, t.z), __fmul_rn(a1, t.w)));
					const unsigned a = row + (unsigned)((j ^ e.g) * 16);
					asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(a), "r"(x) : "memory");
					asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(a + 8192u), "r"(y) : "memory");
				}
			}
			gs_stage_store(e, om, ob, col0 + hh * 128, rt);
			if (cache) {
#pragma unroll
				for (int q = 0; q < 8; q++) {
					const int idx = q * 128 + e.tid(), rl = idx >> 4, cc = idx & 15, r = rt + rl;
					if (r >= M) continue;
					const int slot = s.ps ? s.ps[2 * r + 1] : (s.pos0 + r < s.cap ? s.pos0 + r : -1);
					if (slot < 0) continue;
					uint4 v;
					const unsigned a = ob + (unsigned)(cc >> 3) * 8192u + (unsigned)rl * 128u + (unsigned)(((cc & 7) ^ (rl & 7)) * 16);
					asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a) : "memory");
					*(uint4*)(cache + (usize)slot * nk + col0 + hh * 128 + cc * 8) = v;
				}
			}
		}
	}
	// finish waits for the consumer's last stores before the block exits.
	__device__ __forceinline__ void finish(const gs_ep& e) const {
		if (e.lead()) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
	}
};

// gs_gemm is the kernels' body: the product of x [M,K] (map mx) with the
// 256 weight rows of each of op.cols() column tiles, op's copies and
// epilogue (the file comment's layout).
template <class Op>
__device__ __forceinline__ void gs_gemm(const Op& op, const gs_tmap* mx, int M, int K) {
	extern __shared__ __attribute__((aligned(1024))) unsigned char gs_sm[];
	__shared__ unsigned long long gs_bars[2 * GS_NS];  // per stage: full, empty
	const unsigned base = (smem_u32(gs_sm) + 1023) & ~1023u;
	const unsigned bars = smem_u32(gs_bars);
	const int tid = threadIdx.x;
	const int wg = __shfl_sync(FT_FULL, tid >> 7, 0);  // warp-uniform to the compiler
	const int mt = (M + GS_BM - 1) / GS_BM, nt = op.cols(), kt = K / GS_BK, tiles = mt * nt;

	if (tid == 0) {
#pragma unroll
		for (int s = 0; s < GS_NS; s++) {
			gs_mbar_init(bars + 8u * s, 1);                // the producer's expect_tx
			gs_mbar_init(bars + 8u * (GS_NS + s), 2);      // one arrival a consumer
		}
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
	}
	__syncthreads();

	if (wg == 0) {  // the producer
		asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
		if (tid == 0) {
			int it = 0;  // k-steps issued over all tiles: the stage ring's position
			for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
				int m0, c;
				gs_tile(t, mt, nt, m0, c);
				for (int k = 0; k < kt; k++, it++) {
					const int s = it % GS_NS;
					const unsigned ph = (unsigned)(it / GS_NS) & 1u;
					const unsigned st = base + (unsigned)s * GS_STAGE, full = bars + 8u * s;
					gs_mbar_wait(bars + 8u * (GS_NS + s), ph ^ 1u);
					gs_expect(full, GS_STAGE);
					gs_tma(st, mx, k * GS_BK, m0, full);
					op.load(st + GS_ABYTES, k, c, full);
				}
			}
		}
		return;
	}
	asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
	const int cw = wg - 1, wtid = tid & 127, warp = wtid >> 5, lane = tid & 31;
	const int g = lane >> 2, tg = lane & 3;
	// release: the consumer is done with stage s (wgmma.wait_group is
	// warpgroup-wide: one arrival for its 128 threads).
	const auto release = [&](int s) {
		if (wtid == 0) gs_mbar_arrive(bars + 8u * (GS_NS + s));
	};
	// Descriptor words (wg_desc: 128-byte swizzle, 8-row groups 1024 bytes
	// apart); the upper word is fixed, the lower steps by the address >> 4.
	const unsigned long long hi = wg_desc(0, 16, 1024);
	float d[128];
#pragma unroll
	for (int i = 0; i < 128; i++) d[i] = 0.f;
	gs_ep e{M, 0, 0, cw, warp, g, tg, base + GS_NS * GS_STAGE};
	int it = 0;
	for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
		int m0, c;
		gs_tile(t, mt, nt, m0, c);
		e.m0 = m0;
		e.c = c;
		int sp = 0;  // the previous k-step's stage
		for (int k = 0; k < kt; k++, it++) {
			const int s = it % GS_NS;
			gs_mbar_wait(bars + 8u * s, (unsigned)(it / GS_NS) & 1u);
			const unsigned st = base + (unsigned)s * GS_STAGE;
			const unsigned a = st + (unsigned)cw * (64 * 128), b = st + GS_ABYTES;
			wg_pin<128>(d);
			wg_fence();
#pragma unroll
			for (int kk = 0; kk < 4; kk++)
				gs_mma(d, hi | (unsigned long long)(((a + kk * 32) & 0x3FFFF) >> 4),
						hi | (unsigned long long)(((b + kk * 32) & 0x3FFFF) >> 4), k > 0 || kk > 0);
			wg_commit();
			gs_wait1();
			wg_pin<128>(d);
			if (k > 0) release(sp);
			sp = s;
		}
		wg_wait0();
		wg_pin<128>(d);
		release(sp);
		op.store(d, e);
	}
	op.finish(e);
}

extern "C" __global__ void __launch_bounds__(GS_NT, 1) gemm_swiglu_bf16(bf16_t* out, int M, int N, int K, const __grid_constant__ gs_swiglu_maps maps) {
	gs_gemm(gs_swiglu{out, N, &maps.g, &maps.u}, &maps.x, M, K);
}

// gemm_swiglu_tma_bf16 is gemm_swiglu_bf16 storing by TMA (gs_swiglu_tma);
// its dynamic shared memory is GS_SMEM_TMA.
extern "C" __global__ void __launch_bounds__(GS_NT, 1) gemm_swiglu_tma_bf16(bf16_t* out, int M, int N, int K, const __grid_constant__ gs_swiglu_tma_maps maps) {
	gs_gemm(gs_swiglu_tma{{out, N, &maps.g, &maps.u}, &maps.o}, &maps.x, M, K);
}

// gemm_qkv_rope_tma_bf16: q, k, v = x·[wq; wk; wv]ᵀ with q and k rotated
// and k, v stored into the cache (gs_qkv_tma); head width 128, H and KV
// even; its dynamic shared memory is GS_SMEM_TMA.
extern "C" __global__ void __launch_bounds__(GS_NT, 1) gemm_qkv_rope_tma_bf16(bf16_t* kc, bf16_t* vc,
		const int* ps, int pos0, int cap, const float2* cs, int H, int KV, int M, int K, const __grid_constant__ gs_qkv_tma_maps maps) {
	gs_gemm(gs_qkv_tma{{kc, vc, ps, pos0, cap, cs, H, KV, &maps.q, &maps.k, &maps.v}, &maps.oq, &maps.ok, &maps.ov}, &maps.x, M, K);
}

// rope_cs_table: out[p·half + i] = (cos, sin) of p·inv[i] for p < n, as
// the RoPE kernels compute them (sincosf of the correctly rounded product).
extern "C" __global__ void rope_cs_table(float2* out, const float* inv, int half, int n) {
	const long long total = (long long)n * half;
	for (long long x = (long long)blockIdx.x * blockDim.x + threadIdx.x; x < total; x += (long long)gridDim.x * blockDim.x) {
		const int p = (int)(x / half), i = (int)(x - (long long)p * half);
		float s, c;
		sincosf(__fmul_rn((float)p, inv[i]), &s, &c);
		out[x] = make_float2(c, s);
	}
}
