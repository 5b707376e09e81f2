// Variants wg7 and wg8 (FT_PREFILL_VARIANT): wg6's kernels
// (sm90a/prefill_wg6.cu) with a lazier softmax. Nsight Compute on wg6 at
// 8,192 positions (s21b) put 43% of the warps' samples in the softmax, half
// of them stalled on fixed-latency dependencies with two warps a scheduler;
// these variants drop the instructions that can go without changing a sum
// (the roundings they change are described at prefill_wg6_body):
//  - wg7 (SOFT WG6_LAZY | WG6_TCSUM): the running maxima move only past a
//    slack of WG7_SLACK, so most tiles skip the rescale, and the row sums
//    come from the tensor cores (P times a tile of ones beside P·V) in
//    place of 64 additions a thread and tile; 256 more bytes of shared
//    memory. s21c: 17% fewer instructions, no faster than wg6.
//  - wg8 (WG6_LAZY): the slack alone, to say whether the ones' wgmmas cost
//    what the additions did.
// Same arguments and grids as wg6.

// The kernels, as wg6's (sm90a/prefill_wg6.cu) with their SOFT.
// attn_prefill_wg7_d128_bf16: wg7's fixed-length kernel (grid (H, ceil(T/128))), head width 128.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_prefill_wg7_d128_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_wg6_fixed<128, WG6_LAZY | WG6_TCSUM>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}
// attn_varlen_prefill_wg7_d128_bf16: wg7's varlen kernel over the paged pool (grid (H, tiles)), head width 128.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_prefill_wg7_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_wg6_varlen_paged<128, WG6_LAZY | WG6_TCSUM>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
// attn_varlen_contig_prefill_wg7_d128_bf16: wg7's varlen kernel over packed fresh sequences (grid (H, tiles)), head width 128.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_contig_prefill_wg7_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* k, const bf16_t* v, int H, int K, const int* tiles, const int* qStarts, float scale_log2, int window) {
	prefill_wg6_varlen_contig<128, WG6_LAZY | WG6_TCSUM>(out, q, k, v, H, K, tiles, qStarts, scale_log2, window);
}
// attn_prefill_wg7_d64_bf16: wg7's fixed-length kernel (grid (H, ceil(T/128))), head width 64.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_prefill_wg7_d64_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_wg6_fixed<64, WG6_LAZY | WG6_TCSUM>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}
// attn_varlen_prefill_wg7_d64_bf16: wg7's varlen kernel over the paged pool (grid (H, tiles)), head width 64.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_prefill_wg7_d64_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_wg6_varlen_paged<64, WG6_LAZY | WG6_TCSUM>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
// attn_varlen_contig_prefill_wg7_d64_bf16: wg7's varlen kernel over packed fresh sequences (grid (H, tiles)), head width 64.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_contig_prefill_wg7_d64_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* k, const bf16_t* v, int H, int K, const int* tiles, const int* qStarts, float scale_log2, int window) {
	prefill_wg6_varlen_contig<64, WG6_LAZY | WG6_TCSUM>(out, q, k, v, H, K, tiles, qStarts, scale_log2, window);
}
// attn_prefill_wg8_d128_bf16: wg8's fixed-length kernel (grid (H, ceil(T/128))), head width 128.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_prefill_wg8_d128_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_wg6_fixed<128, WG6_LAZY>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}
// attn_varlen_prefill_wg8_d128_bf16: wg8's varlen kernel over the paged pool (grid (H, tiles)), head width 128.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_prefill_wg8_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_wg6_varlen_paged<128, WG6_LAZY>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
// attn_varlen_contig_prefill_wg8_d128_bf16: wg8's varlen kernel over packed fresh sequences (grid (H, tiles)), head width 128.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_contig_prefill_wg8_d128_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* k, const bf16_t* v, int H, int K, const int* tiles, const int* qStarts, float scale_log2, int window) {
	prefill_wg6_varlen_contig<128, WG6_LAZY>(out, q, k, v, H, K, tiles, qStarts, scale_log2, window);
}
// attn_prefill_wg8_d64_bf16: wg8's fixed-length kernel (grid (H, ceil(T/128))), head width 64.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_prefill_wg8_d64_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int T, int H, int K, const int* posp, int pos0, float scale_log2, int window) {
	prefill_wg6_fixed<64, WG6_LAZY>(out, q, kc, vc, T, H, K, posp, pos0, scale_log2, window);
}
// attn_varlen_prefill_wg8_d64_bf16: wg8's varlen kernel over the paged pool (grid (H, tiles)), head width 64.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_prefill_wg8_d64_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table,
		int maxBlocks, int bs, float scale_log2, int window) {
	prefill_wg6_varlen_paged<64, WG6_LAZY>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
// attn_varlen_contig_prefill_wg8_d64_bf16: wg8's varlen kernel over packed fresh sequences (grid (H, tiles)), head width 64.
extern "C" __global__ void __launch_bounds__(WG_NT, 1) attn_varlen_contig_prefill_wg8_d64_bf16(bf16_t* out, const bf16_t* q,
		const bf16_t* k, const bf16_t* v, int H, int K, const int* tiles, const int* qStarts, float scale_log2, int window) {
	prefill_wg6_varlen_contig<64, WG6_LAZY>(out, q, k, v, H, K, tiles, qStarts, scale_log2, window);
}
