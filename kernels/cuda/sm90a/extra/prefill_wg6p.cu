// Variant wg6p (FT_PREFILL_VARIANT=wg6p): wg6 (sm90a/prefill_wg6.cu) whose
// blocks also ask L2 for the query rows of the block one wave ahead of
// them (and, over packed contiguous keys, that block's first key and value
// tiles), so that its first copies find them there. One block an SM, so
// a block's first copies wait for DRAM with nothing else on its SM: with
// 64 sequences of 512 tokens a block has 1–4 key tiles and that wait is a
// large share of it. The prefetches are hints (prefetch.global.L2): the
// results are wg6's bit for bit.
//
// The block one wave ahead is the one whose linear index (blockIdx.y ·
// gridDim.x + blockIdx.x, the order blocks are started in) is this
// block's plus the SM count (%nsmid): about the block that starts when
// this one ends. Each thread issues its prefetches in prefill_wg6_body's
// pre, after its own first copies are in flight, so the grid and tile
// lookups they need do not delay them.

// wg6p_l2 asks for the 128-byte line at p in L2.
__device__ __forceinline__ void wg6p_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// wg6p_ahead is the linear block index one wave ahead of this block's, or
// −1 past the grid.
__device__ __forceinline__ int wg6p_ahead() {
	unsigned nsm;
	asm("mov.u32 %0, %%nsmid;" : "=r"(nsm));
	const int n = (int)(gridDim.x * gridDim.y), l = (int)(blockIdx.y * gridDim.x + blockIdx.x) + (int)nsm;
	return l < n ? l : -1;
}

// wg6p_rows asks L2 for rows r0..r0+n−1 (n ≤ 128) of head h of x, rows rs
// elements apart: HD·2/128 lines a row, spread over the block's threads.
template <int HD>
__device__ __forceinline__ void wg6p_rows(const bf16_t* x, usize rs, int h, int r0, int n) {
	constexpr int L = HD * 2 / 128;
	static_assert(L >= 1, "rows of at least one line");
	for (int i = threadIdx.x; i < n * L; i += WG_NT) wg6p_l2(x + (usize)(r0 + i / L) * rs + (usize)h * HD + (i % L) * 64);
}

// prefill_wg6p_fixed is prefill_wg6_fixed with the prefetch: the block one
// wave ahead's query rows (its keys, the cache's first tiles, are shared
// by every block and in L2 already).
template <int HD>
__device__ __forceinline__ void prefill_wg6p_fixed(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int T, int H,
		int K, const int* posp, int pos0, float scale_log2, int window) {
	const wg_contig kv = {(usize)K * HD};
	const auto pre = [&]() {
		const int l = wg6p_ahead();
		if (l < 0) return;
		const int qt = (int)gridDim.y - 1 - l / (int)gridDim.x;
		wg6p_rows<HD>(q, (usize)H * HD, l % (int)gridDim.x, qt * WG_BM, min(WG_BM, T - qt * WG_BM));
	};
	prefill_wg6_body<HD, 128, 3>(out, q, kc, vc, T, H, blockIdx.x, blockIdx.x / (H / K), gridDim.y - 1 - blockIdx.y,
		ft_pos(posp, pos0), scale_log2, window, kv, pre);
}

// prefill_wg6p_varlen_paged is prefill_wg6_varlen_paged with the prefetch
// of the query rows of the block one wave ahead.
template <int HD>
__device__ __forceinline__ void prefill_wg6p_varlen_paged(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc, int H,
		int K, const int* tiles, const int* qStarts, const int* lens, const int* table, int maxBlocks, int bs, float scale_log2,
		int window) {
	const int h = blockIdx.x, seq = tiles[2 * blockIdx.y], qtile = tiles[2 * blockIdx.y + 1];
	const int q0 = qStarts[seq], T = qStarts[seq + 1] - q0;
	const usize qs = (usize)H * HD;
	const wg_paged kv = {table + (usize)seq * maxBlocks, bs, (usize)K * HD};
	const auto pre = [&]() {
		const int l = wg6p_ahead();
		if (l < 0) return;
		const int y = l / (int)gridDim.x, s = tiles[2 * y], qt = tiles[2 * y + 1];
		const int a0 = qStarts[s], n = qStarts[s + 1] - a0;
		wg6p_rows<HD>(q, qs, l % (int)gridDim.x, a0 + qt * WG_BM, min(WG_BM, n - qt * WG_BM));
	};
	prefill_wg6_body<HD, 128, 3>(out + (usize)q0 * qs, q + (usize)q0 * qs, kc, vc, T, H, h, h / (H / K), qtile, lens[seq] - T,
		scale_log2, window, kv, pre);
}

// prefill_wg6p_varlen_contig is prefill_wg6_varlen_contig with the
// prefetch of the query rows and the first key and value tiles of the
// block one wave ahead.
template <int HD>
__device__ __forceinline__ void prefill_wg6p_varlen_contig(bf16_t* out, const bf16_t* q, const bf16_t* k, const bf16_t* v, int H,
		int K, const int* tiles, const int* qStarts, float scale_log2, int window) {
	const int h = blockIdx.x;
	const int seq = tiles[2 * blockIdx.y], qtile = tiles[2 * blockIdx.y + 1];
	const int q0 = qStarts[seq], T = qStarts[seq + 1] - q0;
	const usize qs = (usize)H * HD, ks = (usize)K * HD;
	const wg_contig kv = {ks};
	const auto pre = [&]() {
		const int l = wg6p_ahead();
		if (l < 0) return;
		const int y = l / (int)gridDim.x, hh = l % (int)gridDim.x, s = tiles[2 * y], qt = tiles[2 * y + 1];
		const int a0 = qStarts[s], n = qStarts[s + 1] - a0, b0 = qt * WG_BM;
		wg6p_rows<HD>(q, qs, hh, a0 + b0, min(WG_BM, n - b0));
		// The first key tile: 0, or the window's first (prefill_wg6_body's jfirst).
		const int j0 = window > 0 ? max(0, b0 - window + 1) / 128 * 128 : 0, nk = min(128, n - j0);
		wg6p_rows<HD>(k, ks, hh / (H / K), a0 + j0, nk);
		wg6p_rows<HD>(v, ks, hh / (H / K), a0 + j0, nk);
	};
	prefill_wg6_body<HD, 128, 3>(out + (usize)q0 * qs, q + (usize)q0 * qs, k + (usize)q0 * ks, v + (usize)q0 * ks, T, H, h,
		h / (H / K), qtile, 0, scale_log2, window, kv, pre);
}

// The kernels of wg6p: wg6's (prefill_wg6.cu's list) with the prefetch,
// head widths 128 and 64.

// attn_prefill_wg6p_d128_bf16: attn_prefill_wg6_d128_bf16 with the prefetch.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_prefill_wg6p_d128_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_wg6p_fixed<128>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}
// attn_varlen_prefill_wg6p_d128_bf16: attn_varlen_prefill_wg6_d128_bf16 with the prefetch.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_prefill_wg6p_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_wg6p_varlen_paged<128>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
// attn_varlen_contig_prefill_wg6p_d128_bf16: attn_varlen_contig_prefill_wg6_d128_bf16 with the prefetch.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_contig_prefill_wg6p_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* k, const bf16_t* v, int H, int K, const int* tiles, const int* qStarts, float scale_log2, int window) {
	prefill_wg6p_varlen_contig<128>(out, q, k, v, H, K, tiles, qStarts, scale_log2, window);
}
// attn_prefill_wg6p_d64_bf16: attn_prefill_wg6_d64_bf16 with the prefetch.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_prefill_wg6p_d64_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_wg6p_fixed<64>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}
// attn_varlen_prefill_wg6p_d64_bf16: attn_varlen_prefill_wg6_d64_bf16 with the prefetch.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_prefill_wg6p_d64_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_wg6p_varlen_paged<64>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
// attn_varlen_contig_prefill_wg6p_d64_bf16: attn_varlen_contig_prefill_wg6_d64_bf16 with the prefetch.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_contig_prefill_wg6p_d64_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* k, const bf16_t* v, int H, int K, const int* tiles, const int* qStarts, float scale_log2, int window) {
	prefill_wg6p_varlen_contig<64>(out, q, k, v, H, K, tiles, qStarts, scale_log2, window);
}
