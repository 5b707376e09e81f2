// Variant wg6o (FT_PREFILL_VARIANT=wg6o): wg6's kernels (sm90a/prefill_wg6.cu)
// with OVL, each warpgroup's softmax overlapping its own previous P·V on the
// tensor cores besides the other warpgroup's products (prefill_wg6_body's
// comment). Nsight Compute on wg6 at 8,192 positions (s21b): tensor pipe
// active 58%, each warp's softmax 43% of its samples and its products'
// wait 11%; two softmaxes with fewer instructions (wg7, wg8) did not shorten
// a step. The same sums in the same order as wg6 (outputs equal bit for
// bit); one more P buffer (32 registers a thread).

// attn_prefill_wg6o_d128_bf16: as wg6's, head width 128.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_prefill_wg6o_d128_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_wg6_fixed<128, true>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}
// attn_varlen_prefill_wg6o_d128_bf16: as wg6's, head width 128.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_prefill_wg6o_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_wg6_varlen_paged<128, true>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
// attn_varlen_contig_prefill_wg6o_d128_bf16: as wg6's, head width 128.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_contig_prefill_wg6o_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* k, const bf16_t* v, int H, int K, const int* tiles, const int* qStarts, float scale_log2, int window) {
	prefill_wg6_varlen_contig<128, true>(out, q, k, v, H, K, tiles, qStarts, scale_log2, window);
}
// attn_prefill_wg6o_d64_bf16: as wg6's, head width 64.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_prefill_wg6o_d64_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_wg6_fixed<64, true>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}
// attn_varlen_prefill_wg6o_d64_bf16: as wg6's, head width 64.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_prefill_wg6o_d64_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_wg6_varlen_paged<64, true>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
// attn_varlen_contig_prefill_wg6o_d64_bf16: as wg6's, head width 64.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_contig_prefill_wg6o_d64_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* k, const bf16_t* v, int H, int K, const int* tiles, const int* qStarts, float scale_log2, int window) {
	prefill_wg6_varlen_contig<64, true>(out, q, k, v, H, K, tiles, qStarts, scale_log2, window);
}
