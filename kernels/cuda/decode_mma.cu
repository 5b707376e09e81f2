// One-query-per-sequence decode attention on tensor cores, for head widths
// 64 and 128 and up to 8 query heads per KV head (issue 15, issue 21). It
// replaces the staged decode kernels (attn_decode_*, attn_paged_decode_*)
// and, in most launches, their separate combine launch:
//
//   - no shared-memory staging: every warp loads its own keys and values
//     straight into registers (16-byte loads, whole 32-byte sectors) and
//     feeds them to mma.m16n8k16 without ldmatrix. The head dimension of
//     the q·k products and the output columns of p·v are permuted so that
//     each thread's fragments are whole 16-byte loads (a dot product does
//     not care in which order it sums; the output permutation is undone on
//     the write). The G ≤ 8 query heads of a KV head are rows 0..G−1 of the
//     16-row A operand; the other rows are zero and never written.
//   - every warp owns its 16-key groups (the block's four warps take every
//     fourth group) with its own running max, sum and output, merged through
//     shared memory at the end: no block barrier per group, and the next
//     group's pool rows are looked up (block table) while the current
//     group's products run.
//   - the split partials are merged by the last block of a (query, KV head)
//     to finish (an atomic counter per pair, reset by that block, so graphs
//     replay), which writes the bf16 output: no attn_combine_bf16 launch. One
//     split writes its output directly.
//
// Math: scores s_p = q·k_p scaled by scale_log2 = log2(e)/√d, base-2
// softmax, probabilities rounded to bf16 for the p·v products (as the flash
// kernels do), sums in fp32. Partials: po[t,s,h,:] = Σ_p 2^(s_p−m)·v_p and
// pml[t,s,h] = (m, Σ_p 2^(s_p−m)) as attn_split_bf16 writes them.

// prmt_lo packs the low halves of a and b (a's in the low half of the
// result); prmt_hi the high halves.
__device__ __forceinline__ unsigned prmt_lo(unsigned a, unsigned b) {
	unsigned r;
	asm("prmt.b32 %0, %1, %2, 0x5410;" : "=r"(r) : "r"(a), "r"(b));
	return r;
}
__device__ __forceinline__ unsigned prmt_hi(unsigned a, unsigned b) {
	unsigned r;
	asm("prmt.b32 %0, %1, %2, 0x7632;" : "=r"(r) : "r"(a), "r"(b));
	return r;
}

// u4word is word i (0..3) of u.
__device__ __forceinline__ unsigned u4word(const uint4& u, int i) { return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w; }

// ld_cg_f32 reads through L2 (not L1): another block's partials.
__device__ __forceinline__ float ld_cg_f32(const float* p) {
	float v;
	asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
	return v;
}

// decode_group is one 16-key group of the tensor-core decode attention
// (decode_mma_body here, decode_pipe_body in decode_pipe.cu): S = q·Kᵀ for
// keys p0 … p0+15 (those at or past end masked) from the thread's two keys'
// loads kw0 and kw1, the online softmax's update of m and l (this thread's
// share of the row sum), and O = O·a + P·V from four keys' value loads vw.
template <int HD>
__device__ __forceinline__ void decode_group(float (&o)[HD / 8][4], float& m, float& l, const uint4 (&qa)[HD / 32],
		const uint4 (&kw0)[HD / 32], const uint4 (&kw1)[HD / 32], const uint4 (&vw)[4][HD / 64], int p0, int end, int tg,
		float scale_log2) {
	constexpr int KJ = HD / 32, ND = HD / 8;
	// S[g][key] for the group's keys p0+nb·8+col: thread holds columns
	// 2tg, 2tg+1 of each 8-key block nb.
	float s[2][4];
#pragma unroll
	for (int nb = 0; nb < 2; nb++) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
#pragma unroll
	for (int j = 0; j < KJ; j++) {
		const unsigned a0[4] = {qa[j].x, 0u, qa[j].y, 0u};
		const unsigned a1[4] = {qa[j].z, 0u, qa[j].w, 0u};
		mma_bf16(s[0], a0, kw0[j].x, kw0[j].y);
		mma_bf16(s[0], a1, kw0[j].z, kw0[j].w);
		mma_bf16(s[1], a0, kw1[j].x, kw1[j].y);
		mma_bf16(s[1], a1, kw1[j].z, kw1[j].w);
	}
	float mx = -FT_INF;
#pragma unroll
	for (int nb = 0; nb < 2; nb++) {
#pragma unroll
		for (int e = 0; e < 2; e++) {
			const int key = p0 + nb * 8 + 2 * tg + e;
			s[nb][e] = key < end ? s[nb][e] * scale_log2 : -FT_INF;
			mx = fmaxf(mx, s[nb][e]);
		}
	}
	mx = fmaxf(mx, __shfl_xor_sync(FT_FULL, mx, 1));
	mx = fmaxf(mx, __shfl_xor_sync(FT_FULL, mx, 2));
	const float mn = fmaxf(m, mx);  // finite: key p0 < end is visible
	const float a = exp2f(m - mn);
	m = mn;
	float rsum = 0.f;
#pragma unroll
	for (int nb = 0; nb < 2; nb++) {
		s[nb][0] = exp2f(s[nb][0] - mn);
		s[nb][1] = exp2f(s[nb][1] - mn);
		rsum += s[nb][0] + s[nb][1];
	}
	l = l * a + rsum;  // this thread's share; reduced over tg at the end
	const unsigned pa[4] = {pack_bf16(s[0][0], s[0][1]), 0u, pack_bf16(s[1][0], s[1][1]), 0u};
#pragma unroll
	for (int nd = 0; nd < ND; nd++) {
		o[nd][0] *= a;
		o[nd][1] *= a;
		// Column g of block nd is dimension 64(nd/8) + 8g + nd%8: element
		// nd%8 of each key's load u = nd/8.
		const int u = nd / 8, e = nd % 8, w = e / 2;
		unsigned b0, b1;
		if (e % 2 == 0) {
			b0 = prmt_lo(u4word(vw[0][u], w), u4word(vw[1][u], w));
			b1 = prmt_lo(u4word(vw[2][u], w), u4word(vw[3][u], w));
		} else {
			b0 = prmt_hi(u4word(vw[0][u], w), u4word(vw[1][u], w));
			b1 = prmt_hi(u4word(vw[2][u], w), u4word(vw[3][u], w));
		}
		mma_bf16(o[nd], pa, b0, b1);
	}
}

// decode_mma_body: block (kvh, split, t) = blockIdx (x, y, z), 128 threads,
// takes split `split` of query row t's visible positions for KV head kvh.
// PAGED: query row t is sequence rows[2t] at position rows[2t+1], position p
// at pool row table[seq·maxBlocks + p/bs]·bs + p%bs. Else query row t sits
// at position ft_pos(posp, pos0)+t and position p at cache row p.
// With nsplit == 1 the block writes out[t, kvh·G.., :] itself; else it
// writes its partials and the last of the nsplit blocks of (t, kvh) to
// finish (cnt[t·K+kvh], zero between launches) merges them into out.
template <int HD, bool PAGED>
__device__ __forceinline__ void decode_mma_body(bf16_t* out, float* po, float* pml, int* cnt, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int H, int K, int nsplit, const int* rows, const int* table, int maxBlocks, int bs, const int* posp, int pos0,
		float scale_log2, int window) {
	ft_pdl_wait();
	constexpr int NW = 4;        // warps
	constexpr int KJ = HD / 32;  // 16-byte key loads per key and thread: two k-steps each
	constexpr int VU = HD / 64;  // 16-byte value loads per key and thread
	constexpr int ND = HD / 8;   // 8-column blocks of the output
	__shared__ float so[NW][8][HD];
	__shared__ float sm_m[NW][8], sm_l[NW][8];
	__shared__ int isLast;
	const int kvh = blockIdx.x, split = blockIdx.y, t = blockIdx.z;
	const int G = H / K, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int g = lane >> 2, tg = lane & 3;
	const int* tab = nullptr;
	int n;
	if (PAGED) {
		tab = table + (usize)rows[2 * t] * maxBlocks;
		n = rows[2 * t + 1] + 1;
	} else {
		n = ft_pos(posp, pos0) + t + 1;
	}
	const int lo = window > 0 ? max(0, n - window) : 0;
	const int chunk = (n - lo + nsplit - 1) / nsplit;
	const int beg = lo + split * chunk, end = min(n, beg + chunk);
	const usize rs = (usize)K * HD;  // elements between cache rows
	const bf16_t* kb = kc + (usize)kvh * HD;
	const bf16_t* vb = vc + (usize)kvh * HD;

	// Query fragments: Q[g][32j+8tg .. +7] for row g < G (zero otherwise).
	uint4 qa[KJ];
	{
		const bf16_t* qr = q + ((usize)t * H + (usize)kvh * G + (g < G ? g : 0)) * HD + 8 * tg;
#pragma unroll
		for (int j = 0; j < KJ; j++) qa[j] = g < G ? *(const uint4*)(qr + 32 * j) : make_uint4(0u, 0u, 0u, 0u);
	}
	float o[ND][4];
#pragma unroll
	for (int nd = 0; nd < ND; nd++) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.f;
	float m = -FT_INF, l = 0.f;

	// rowOf: the cache row of position p (a position past end reads the
	// split's first row instead: its probability is zero, its values finite).
	auto rowOf = [&](int p) -> int {
		if (p >= end) p = beg;
		return PAGED ? tab[p / bs] * bs + p % bs : p;
	};
	int myrow = 0;
	if (beg + warp * 16 < end) myrow = rowOf(beg + warp * 16 + (lane & 15));
	for (int p0 = beg + warp * 16; p0 < end; p0 += NW * 16) {
		const int kr0 = __shfl_sync(FT_FULL, myrow, g), kr1 = __shfl_sync(FT_FULL, myrow, 8 + g);
		const int vr0 = __shfl_sync(FT_FULL, myrow, 2 * tg), vr1 = __shfl_sync(FT_FULL, myrow, 2 * tg + 1);
		const int vr2 = __shfl_sync(FT_FULL, myrow, 8 + 2 * tg), vr3 = __shfl_sync(FT_FULL, myrow, 9 + 2 * tg);
		uint4 kw0[KJ], kw1[KJ], vw[4][VU];
		{
			const bf16_t* k0 = kb + (usize)kr0 * rs + 8 * tg;
			const bf16_t* k1 = kb + (usize)kr1 * rs + 8 * tg;
#pragma unroll
			for (int j = 0; j < KJ; j++) {
				kw0[j] = *(const uint4*)(k0 + 32 * j);
				kw1[j] = *(const uint4*)(k1 + 32 * j);
			}
			const int vr[4] = {vr0, vr1, vr2, vr3};
#pragma unroll
			for (int i = 0; i < 4; i++) {
				const bf16_t* v = vb + (usize)vr[i] * rs + 8 * g;
#pragma unroll
				for (int u = 0; u < VU; u++) vw[i][u] = *(const uint4*)(v + 64 * u);
			}
		}
		// The next group's rows, while this group's loads are in flight.
		if (p0 + NW * 16 < end) myrow = rowOf(p0 + NW * 16 + (lane & 15));

		decode_group<HD>(o, m, l, qa, kw0, kw1, vw, p0, end, tg, scale_log2);
	}
	l += __shfl_xor_sync(FT_FULL, l, 1);
	l += __shfl_xor_sync(FT_FULL, l, 2);
	if (g < G) {
#pragma unroll
		for (int nd = 0; nd < ND; nd++) {
			const int d0 = 64 * (nd / 8) + 16 * tg + nd % 8;  // columns 2tg and 2tg+1 of block nd
			so[warp][g][d0] = o[nd][0];
			so[warp][g][d0 + 8] = o[nd][1];
		}
		if (tg == 0) {
			sm_m[warp][g] = m;
			sm_l[warp][g] = l;
		}
	}
	__syncthreads();
	const usize base = ((usize)t * nsplit + split) * H + (usize)kvh * G;
	for (int j = tid; j < G * HD; j += NW * 32) {
		const int gg = j / HD, dd = j - gg * HD;
		float M = -FT_INF;
#pragma unroll
		for (int w = 0; w < NW; w++) M = fmaxf(M, sm_m[w][gg]);
		float O = 0.f, L = 0.f;
		if (M != -FT_INF) {
#pragma unroll
			for (int w = 0; w < NW; w++) {
				const float f = exp2f(sm_m[w][gg] - M);
				O += f * so[w][gg][dd];
				L += f * sm_l[w][gg];
			}
		}
		if (nsplit == 1) {
			out[((usize)t * H + (usize)kvh * G + gg) * HD + dd] = f2bf(O / L);
		} else {
			po[(base + gg) * HD + dd] = O;
			if (dd == 0) {
				pml[(base + gg) * 2] = M;
				pml[(base + gg) * 2 + 1] = L;
			}
		}
	}
	if (nsplit == 1) return;
	// The last block of (t, kvh) to finish merges the splits.
	__threadfence();
	__syncthreads();
	if (tid == 0) isLast = atomicAdd(cnt + (usize)t * K + kvh, 1) == nsplit - 1;
	__syncthreads();
	if (!isLast) return;
	__threadfence();
	for (int j = tid; j < G * HD; j += NW * 32) {
		const int gg = j / HD, dd = j - gg * HD;
		const usize h = (usize)kvh * G + gg;
		float M = -FT_INF;
		for (int sp = 0; sp < nsplit; sp++) M = fmaxf(M, ld_cg_f32(pml + (((usize)t * nsplit + sp) * H + h) * 2));
		float O = 0.f, L = 0.f;
		for (int sp = 0; sp < nsplit; sp++) {
			const usize i = ((usize)t * nsplit + sp) * H + h;
			const float f = exp2f(ld_cg_f32(pml + i * 2) - M);  // an empty split: m = −∞, f = 0
			L += f * ld_cg_f32(pml + i * 2 + 1);
			O += f * ld_cg_f32(po + i * HD + dd);
		}
		out[((usize)t * H + h) * HD + dd] = f2bf(O / L);
	}
	if (tid == 0) cnt[(usize)t * K + kvh] = 0;
}

// attn_decode_mma_d64_bf16: decode_mma_body over a contiguous cache
// [C,K,64] (queries at positions ft_pos(posp,pos0)+t); grid (K, nsplit, T),
// 128 threads.
extern "C" __global__ void __launch_bounds__(128) attn_decode_mma_d64_bf16(bf16_t* out, float* po, float* pml, int* cnt, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, int nsplit, const int* posp, int pos0, float scale_log2, int window) {
	decode_mma_body<64, false>(out, po, pml, cnt, q, kc, vc, H, K, nsplit, nullptr, nullptr, 0, 1, posp, pos0, scale_log2, window);
}

// attn_decode_mma_d128_bf16 is attn_decode_mma_d64_bf16 for head width 128.
extern "C" __global__ void __launch_bounds__(128) attn_decode_mma_d128_bf16(bf16_t* out, float* po, float* pml, int* cnt, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, int nsplit, const int* posp, int pos0, float scale_log2, int window) {
	decode_mma_body<128, false>(out, po, pml, cnt, q, kc, vc, H, K, nsplit, nullptr, nullptr, 0, 1, posp, pos0, scale_log2, window);
}

// attn_paged_decode_mma_d64_bf16: decode_mma_body over paged pools [P,K,64]
// with the query rows and block table of attn_paged_decode_d64_bf16; grid
// (K, nsplit, rows), 128 threads.
extern "C" __global__ void __launch_bounds__(128) attn_paged_decode_mma_d64_bf16(bf16_t* out, float* po, float* pml, int* cnt,
		const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int H, int K, int nsplit, const int* rows, const int* table, int maxBlocks,
		int bs, float scale_log2, int window) {
	decode_mma_body<64, true>(out, po, pml, cnt, q, kc, vc, H, K, nsplit, rows, table, maxBlocks, bs, nullptr, 0, scale_log2, window);
}

// attn_paged_decode_mma_d128_bf16 is attn_paged_decode_mma_d64_bf16 for head
// width 128.
extern "C" __global__ void __launch_bounds__(128) attn_paged_decode_mma_d128_bf16(bf16_t* out, float* po, float* pml, int* cnt,
		const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int H, int K, int nsplit, const int* rows, const int* table, int maxBlocks,
		int bs, float scale_log2, int window) {
	decode_mma_body<128, true>(out, po, pml, cnt, q, kc, vc, H, K, nsplit, rows, table, maxBlocks, bs, nullptr, 0, scale_log2, window);
}
