// Prefill attention variants, head width 128 (FT_PREFILL_VARIANT; the Go
// side's table is kernels/cudabackend/prefillvariant.go). Same math, masks,
// grid and argument lists as prefill.cu's kernels (the "base" variant: 8
// warps × 16 query rows, queries in registers, one block per SM at d128);
// what changes is how a block's query rows are split over its warps, where
// the queries live, and how many blocks share an SM:
//
//   w4m32: 4 warps × 32 rows (two m16 tiles a warp, 128 rows, 128 threads),
//          the query tile staged in shared memory and its fragments reloaded
//          per k-step; each key or value fragment from ldmatrix feeds both
//          m16 tiles, so shared-memory reads per MMA fall from 256 to 160
//          bytes; ≤ 255 registers, two blocks per SM (104,448 B each).
//   w8q:   8 warps × 16 rows as base, queries in shared memory so that the
//          registers fit 128 a thread: two blocks (16 warps) per SM.
//   m64:   4 warps × 16 rows (64 rows, 128 threads), queries in registers,
//          ≤ 168 registers, three blocks (12 warps) per SM: shorter query
//          tiles for packed short sequences (less of a block idles on the
//          causal diagonal, a block's start-up overlaps the others' math).
//
// Dynamic shared memory: PREFILL_VSMEM(HD, rows, qsmem) bytes, the two
// key/value stages of prefill.cu, after the query tile when it is staged.

#define PREFILL_VSMEM(HD, BM, QS) (PREFILL_SMEM(HD) + ((QS) ? (BM) * ((HD) + 8) * 2 : 0))

// prefill_vload is prefill_load for blocks of NT threads.
template <int HD, int NT, class KV>
__device__ __forceinline__ void prefill_vload(bf16_t* ks, bf16_t* vs, const bf16_t* kc, const bf16_t* vc, const KV& kv, int kvh,
		int j0, int kvEnd) {
	constexpr int LD = HD + 8, CPR = HD / 8;  // 16-byte chunks per row
	constexpr int RPP = NT / CPR;             // rows per pass
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

// prefill_vload_q issues the async copies of query rows r0..r0+BM−1 (of T)
// of head h into qsm (row stride HD+8); rows at or past T are zero-filled.
template <int HD, int NT, int BM>
__device__ __forceinline__ void prefill_vload_q(bf16_t* qsm, const bf16_t* q, int r0, int T, usize qs, int h) {
	constexpr int LD = HD + 8, CPR = HD / 8, RPP = NT / CPR, NP = BM / RPP;
	const int cc = (threadIdx.x % CPR) * 8, rr = threadIdx.x / CPR;
#pragma unroll
	for (int i = 0; i < NP; i++) {
		const int r = rr + i * RPP;
		bf16_t* d = qsm + r * LD + cc;
		if (r0 + r < T) {
			cp_async16(d, q + (usize)(r0 + r) * qs + (usize)h * HD + cc);
		} else {
			*(uint4*)d = make_uint4(0u, 0u, 0u, 0u);
		}
	}
}

// prefill_vbody is prefill_body with NW warps of MT m16 tiles each (query
// tile qtile holds NW·16·MT rows; warp w takes rows w·16·MT..+16·MT−1 of
// it) and, with QS, the queries in shared memory instead of registers.
template <int HD, int NW, int MT, bool QS, class KV>
__device__ __forceinline__ void prefill_vbody(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int T, int H, int h,
		int kvh, int qtile, int pos, float scale_log2, int window, const KV& kv) {
	constexpr int BM = NW * 16 * MT, NT = NW * 32, BN = PREFILL_BN, LD = HD + 8;
	constexpr int KS = HD / 16;  // k-steps of S over the head dimension
	constexpr int NB = BN / 8;   // 8-key column blocks of S
	constexpr int ND = HD / 8;   // 8-wide column blocks of O
	constexpr int STAGE = 2 * BN * LD;
	extern __shared__ __attribute__((aligned(16))) bf16_t prefill_vsm[];
	bf16_t* const Qs = prefill_vsm;                          // the query tile (QS)
	bf16_t* const kvs = prefill_vsm + (QS ? BM * LD : 0);  // the key/value stages
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int g = lane >> 2, tg = lane & 3;
	const int b0 = qtile * BM;             // the block's first row
	const int t0 = b0 + warp * 16 * MT;    // this warp's first row
	const usize qs = (usize)H * HD;        // elements between tokens of q and out

	unsigned qf[MT][QS ? 1 : KS][4];  // query fragments (registers unless QS)
	if (!QS) {
#pragma unroll
		for (int mt = 0; mt < MT; mt++) {
			const int r0 = t0 + mt * 16 + g, r1 = r0 + 8;
			const bf16_t* q0 = q + (usize)r0 * qs + (usize)h * HD;
			const bf16_t* q1 = q + (usize)r1 * qs + (usize)h * HD;
#pragma unroll
			for (int kk = 0; kk < (QS ? 1 : KS); kk++) {
				const int c = kk * 16 + 2 * tg;
				qf[mt][kk][0] = r0 < T ? *(const unsigned*)(q0 + c) : 0u;
				qf[mt][kk][1] = r1 < T ? *(const unsigned*)(q1 + c) : 0u;
				qf[mt][kk][2] = r0 < T ? *(const unsigned*)(q0 + c + 8) : 0u;
				qf[mt][kk][3] = r1 < T ? *(const unsigned*)(q1 + c + 8) : 0u;
			}
		}
	}
	float o[MT][ND][4];
#pragma unroll
	for (int mt = 0; mt < MT; mt++)
#pragma unroll
		for (int nd = 0; nd < ND; nd++) o[mt][nd][0] = o[mt][nd][1] = o[mt][nd][2] = o[mt][nd][3] = 0.f;
	// Running maxima (scaled) and this thread's share of the row sums, rows
	// g and g+8 of each m16 tile.
	float m[MT][2], l[MT][2];
	int qp[MT][2], lo[MT][2];  // the rows' positions and their windows' first keys
#pragma unroll
	for (int mt = 0; mt < MT; mt++) {
#pragma unroll
		for (int i = 0; i < 2; i++) {
			m[mt][i] = -FT_INF;
			l[mt][i] = 0.f;
			qp[mt][i] = pos + t0 + mt * 16 + g + 8 * i;
			lo[mt][i] = window > 0 ? qp[mt][i] - window + 1 : 0;
		}
	}
	const int lastRow = min(T, b0 + BM) - 1;
	const int kvEnd = pos + lastRow + 1;
	const int ntiles = (kvEnd + BN - 1) / BN;
	const int jfirst = window > 0 ? max(0, pos + b0 - window + 1) / BN : 0;
	const int wq0 = pos + t0, wq1 = wq0 + 16 * MT - 1;  // the warp's query positions
	const bool live = t0 < T;

	if (QS) prefill_vload_q<HD, NT, BM>(Qs, q, b0, T, qs, h);
	prefill_vload<HD, NT>(kvs, kvs + BN * LD, kc, vc, kv, kvh, jfirst * BN, kvEnd);
	cp_async_commit();
	for (int j = jfirst; j < ntiles; j++) {
		const bf16_t* Ks = kvs + ((j - jfirst) & 1) * STAGE;
		const bf16_t* Vs = Ks + BN * LD;
		cp_async_wait0();  // this thread's copies of tile j (and the queries) are done
		__syncthreads();   // everyone's are, and every warp is done with tile j−1's stage
		if (j + 1 < ntiles) {
			bf16_t* nk = kvs + ((j + 1 - jfirst) & 1) * STAGE;
			prefill_vload<HD, NT>(nk, nk + BN * LD, kc, vc, kv, kvh, (j + 1) * BN, kvEnd);
		}
		cp_async_commit();
		const int j0 = j * BN;
		if (!live || j0 > wq1 || (window > 0 && j0 + BN - 1 < wq0 - window + 1)) continue;
		const bool edge = j0 + BN - 1 > wq0 || (window > 0 && j0 < wq1 - window + 1);

		float s[MT][NB][4];
#pragma unroll
		for (int mt = 0; mt < MT; mt++)
#pragma unroll
			for (int nb = 0; nb < NB; nb++) s[mt][nb][0] = s[mt][nb][1] = s[mt][nb][2] = s[mt][nb][3] = 0.f;
#pragma unroll
		for (int kk = 0; kk < KS; kk++) {
			unsigned a[MT][4];
#pragma unroll
			for (int mt = 0; mt < MT; mt++) {
				if (QS) {
					const int row = warp * 16 * MT + mt * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
					const int col = kk * 16 + ((lane >> 4) << 3);
					ldmatrix_x4(a[mt][0], a[mt][1], a[mt][2], a[mt][3], Qs + row * LD + col);
				} else {
					const int k = QS ? 0 : kk;
					a[mt][0] = qf[mt][k][0];
					a[mt][1] = qf[mt][k][1];
					a[mt][2] = qf[mt][k][2];
					a[mt][3] = qf[mt][k][3];
				}
			}
#pragma unroll
			for (int nb = 0; nb < NB; nb += 2) {
				unsigned b0r, b1r, b2r, b3r;
				const int row = nb * 8 + (lane & 7) + ((lane >> 4) << 3);
				const int col = kk * 16 + ((lane >> 3) & 1) * 8;
				ldmatrix_x4(b0r, b1r, b2r, b3r, Ks + row * LD + col);
#pragma unroll
				for (int mt = 0; mt < MT; mt++) {
					mma_bf16(s[mt][nb], a[mt], b0r, b1r);
					mma_bf16(s[mt][nb + 1], a[mt], b2r, b3r);
				}
			}
		}
		if (edge) {
#pragma unroll
			for (int mt = 0; mt < MT; mt++) {
#pragma unroll
				for (int nb = 0; nb < NB; nb++) {
					const int kp = j0 + nb * 8 + 2 * tg;
					if (kp > qp[mt][0] || kp < lo[mt][0]) s[mt][nb][0] = -FT_INF;
					if (kp + 1 > qp[mt][0] || kp + 1 < lo[mt][0]) s[mt][nb][1] = -FT_INF;
					if (kp > qp[mt][1] || kp < lo[mt][1]) s[mt][nb][2] = -FT_INF;
					if (kp + 1 > qp[mt][1] || kp + 1 < lo[mt][1]) s[mt][nb][3] = -FT_INF;
				}
			}
		}
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
				s[mt][nb][0] = prefill_ex2(fmaf(s[mt][nb][0], scale_log2, -ms0));
				s[mt][nb][1] = prefill_ex2(fmaf(s[mt][nb][1], scale_log2, -ms0));
				s[mt][nb][2] = prefill_ex2(fmaf(s[mt][nb][2], scale_log2, -ms1));
				s[mt][nb][3] = prefill_ex2(fmaf(s[mt][nb][3], scale_log2, -ms1));
				rs0 += s[mt][nb][0] + s[mt][nb][1];
				rs1 += s[mt][nb][2] + s[mt][nb][3];
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
#pragma unroll
		for (int kk = 0; kk < NB / 2; kk++) {
			unsigned pf[MT][4];
#pragma unroll
			for (int mt = 0; mt < MT; mt++) {
				pf[mt][0] = pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
				pf[mt][1] = pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
				pf[mt][2] = pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
				pf[mt][3] = pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
			}
#pragma unroll
			for (int nd = 0; nd < ND; nd += 2) {
				unsigned b0r, b1r, b2r, b3r;
				const int row = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
				const int col = nd * 8 + ((lane >> 4) << 3);
				ldmatrix_x4_trans(b0r, b1r, b2r, b3r, Vs + row * LD + col);
#pragma unroll
				for (int mt = 0; mt < MT; mt++) {
					mma_bf16(o[mt][nd], pf[mt], b0r, b1r);
					mma_bf16(o[mt][nd + 1], pf[mt], b2r, b3r);
				}
			}
		}
	}
	cp_async_wait0();
#pragma unroll
	for (int mt = 0; mt < MT; mt++) {
		float l0 = l[mt][0], l1 = l[mt][1];
		l0 += __shfl_xor_sync(FT_FULL, l0, 1);
		l0 += __shfl_xor_sync(FT_FULL, l0, 2);
		l1 += __shfl_xor_sync(FT_FULL, l1, 1);
		l1 += __shfl_xor_sync(FT_FULL, l1, 2);
		const float i0 = l0 > 0.f ? 1.f / l0 : 0.f, i1 = l1 > 0.f ? 1.f / l1 : 0.f;
		const int r0 = t0 + mt * 16 + g, r1 = r0 + 8;
#pragma unroll
		for (int nd = 0; nd < ND; nd++) {
			const int c = nd * 8 + 2 * tg;
			if (r0 < T) *(unsigned*)(out + (usize)r0 * qs + (usize)h * HD + c) = pack_bf16(o[mt][nd][0] * i0, o[mt][nd][1] * i0);
			if (r1 < T) *(unsigned*)(out + (usize)r1 * qs + (usize)h * HD + c) = pack_bf16(o[mt][nd][2] * i1, o[mt][nd][3] * i1);
		}
	}
}

// prefill_vcontig_body is prefill_contig_body for prefill_vbody's layouts.
template <int HD, int NW, int MT, bool QS>
__device__ __forceinline__ void prefill_vcontig_body(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int T, int H,
		int K, const int* posp, int pos0, float scale_log2, int window) {
	const int h = blockIdx.x;
	const prefill_contig kv = {(usize)K * HD};
	prefill_vbody<HD, NW, MT, QS>(out, q, kc, vc, T, H, h, h / (H / K), gridDim.y - 1 - blockIdx.y, ft_pos(posp, pos0), scale_log2,
		window, kv);
}

// prefill_vvarlen_body is prefill_varlen_body for prefill_vbody's layouts
// (tiles of NW·16·MT rows).
template <int HD, int NW, int MT, bool QS>
__device__ __forceinline__ void prefill_vvarlen_body(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int H, int K,
		const int* tiles, const int* qStarts, const int* lens, const int* table, int maxBlocks, int bs, float scale_log2, int window) {
	const int h = blockIdx.x;
	const int seq = tiles[2 * blockIdx.y], qtile = tiles[2 * blockIdx.y + 1];
	const int q0 = qStarts[seq], T = qStarts[seq + 1] - q0;
	const usize qs = (usize)H * HD;
	const prefill_paged kv = {table + (usize)seq * maxBlocks, bs, (usize)K * HD};
	prefill_vbody<HD, NW, MT, QS>(out + (usize)q0 * qs, q + (usize)q0 * qs, kc, vc, T, H, h, h / (H / K), qtile, lens[seq] - T,
		scale_log2, window, kv);
}

// attn_prefill_w4m32_d128_bf16 is attn_prefill_d128_bf16 with 4 warps × 32
// query rows and the query tile in shared memory (w4m32 above); grid (H,
// ceil(T/128)), 128 threads, PREFILL_VSMEM(128, 128, 1) bytes.
extern "C" __global__ void __launch_bounds__(128, 2) attn_prefill_w4m32_d128_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_vcontig_body<128, 4, 2, true>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}

// attn_varlen_prefill_w4m32_d128_bf16 is attn_varlen_prefill_d128_bf16 in
// the w4m32 layout: tiles of 128 rows, 128 threads, PREFILL_VSMEM(128, 128, 1) bytes.
extern "C" __global__ void __launch_bounds__(128, 2) attn_varlen_prefill_w4m32_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_vvarlen_body<128, 4, 2, true>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}

// attn_prefill_w8q_d128_bf16 is attn_prefill_d128_bf16 with the query tile
// in shared memory and two blocks per SM (w8q above); grid (H,
// ceil(T/128)), 256 threads, PREFILL_VSMEM(128, 128, 1) bytes.
extern "C" __global__ void __launch_bounds__(256, 2) attn_prefill_w8q_d128_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_vcontig_body<128, 8, 1, true>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}

// attn_varlen_prefill_w8q_d128_bf16 is attn_varlen_prefill_d128_bf16 in the
// w8q layout: tiles of 128 rows, 256 threads, PREFILL_VSMEM(128, 128, 1) bytes.
extern "C" __global__ void __launch_bounds__(256, 2) attn_varlen_prefill_w8q_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_vvarlen_body<128, 8, 1, true>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}

// attn_prefill_m64_d128_bf16 is attn_prefill_d128_bf16 with 64-row query
// tiles of 4 warps × 16 rows, three blocks per SM (m64 above); grid (H,
// ceil(T/64)), 128 threads, PREFILL_SMEM(128) bytes.
extern "C" __global__ void __launch_bounds__(128, 3) attn_prefill_m64_d128_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_vcontig_body<128, 4, 1, false>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}

// attn_varlen_prefill_m64_d128_bf16 is attn_varlen_prefill_d128_bf16 in the
// m64 layout: tiles of 64 rows, 128 threads, PREFILL_SMEM(128) bytes.
extern "C" __global__ void __launch_bounds__(128, 3) attn_varlen_prefill_m64_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_vvarlen_body<128, 4, 1, false>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
