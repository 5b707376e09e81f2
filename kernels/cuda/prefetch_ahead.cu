// L2 prefetch inside the latency-bound kernels of a one-token decode step
// (cudabackend/l2ahead.go, FT_L2_AHEAD): the RMSNorm and the decode
// attention leave HBM nearly idle, so their "ahead" twins first ask L2 for
// the start of the weights the next GEMV reads (its first rows: the
// persistent GEMVs' warps take rows warp, warp + W, …, so the matrix's
// first bytes are what every warp reads first), then do exactly what the
// plain kernel does. Weights are written by no kernel of the step, so the
// prefetches go out before ft_pdl_wait and overlap the wait; they write
// nothing and change no value (a hint), and add no launch to the chain.

// ft_l2_ahead asks L2 for the whole 128-byte lines of [a0, a0+n0) and
// [a1, a1+n1) (a partial last line is left out, so no address outside the
// ranges is touched), the lines spread over every thread of the grid; where
// both ranges have lines, line i of each is asked for next to the other's
// (gate·up reads row r of both together). last: L2::evict_last, else the
// normal policy. Fire and forget: nothing waits for the lines.
__device__ __forceinline__ void ft_l2_ahead(const char* a0, unsigned long long n0, const char* a1, unsigned long long n1, int last) {
	const unsigned long long l0 = n0 >> 7, l1 = n1 >> 7;
	const unsigned long long m = l0 < l1 ? l0 : l1, total = l0 + l1;
	const unsigned long long nt = (unsigned long long)gridDim.x * gridDim.y * gridDim.z * blockDim.x;
	const unsigned long long tid =
			(((unsigned long long)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
	for (unsigned long long l = tid; l < total; l += nt) {
		const char* p;
		if (l < 2 * m) p = (l & 1 ? a1 : a0) + ((l >> 1) << 7);
		else if (l0 > l1) p = a0 + ((l - m) << 7);
		else p = a1 + ((l - m) << 7);
		if (last) asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(p));
		else asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
	}
}

// rmsnorm_f32in_bf16_ahead is rmsnorm_f32in_bf16 over rows rows (blocks
// 0 .. rows−1, the same bits) plus ft_l2_ahead over the whole grid, issued
// first; blocks rows and up only prefetch (more SMs issuing the lines).
// The kernel after it still waits for the norm: the grid completes only
// when its row blocks, each past ft_pdl_wait, do.
extern "C" __global__ void rmsnorm_f32in_bf16_ahead(bf16_t* out, const float* x, const bf16_t* w, int dim, float eps, int rows,
		const char* a0, unsigned long long n0, const char* a1, unsigned long long n1, int last) {
	__shared__ float sh[32];
	ft_l2_ahead(a0, n0, a1, n1, last);
	if ((int)blockIdx.x >= rows) return;  // the whole block
	ft_pdl_wait();
	rmsnorm_f32in_row(out, x, w, dim, eps, sh);
}

// FT_TR_AHEAD defines attn_decode_pipe_d{HD}_s{S}w{NW}h1t_ahead_bf16:
// decode_tr.cu's attn_decode_pipe_d{HD}_s{S}w{NW}h1t_bf16 (contiguous
// cache, not FAST) with ft_l2_ahead over its grid before the body (whose
// first act is ft_pdl_wait).
#define FT_TR_AHEAD(HD, S, NW)                                                                                                             \
	extern "C" __global__ void __launch_bounds__(NW * 32, FT_PIPE_MINB(HD, S, NW))                                                     \
			attn_decode_pipe_d##HD##_s##S##w##NW##h1t_ahead_bf16(bf16_t* out, float* po, float* pml, int* cnt, const bf16_t* q,           \
					const bf16_t* kc, const bf16_t* vc, int H, int K, int nsplit, int minChunk, const int* posp, int pos0,                 \
					float scale_log2, int window, const char* a0, unsigned long long n0, const char* a1, unsigned long long n1, int last) { \
		ft_l2_ahead(a0, n0, a1, n1, last);                                                                                             \
		decode_tr_body<HD, S, NW, false, false>(out, po, pml, cnt, q, kc, vc, H, K, nsplit, minChunk, nullptr, nullptr, 0, 1, posp, pos0, \
				scale_log2, window);                                                                                                       \
	}

// The default one-sequence variant (decode.go's contigPipeDefault) and its
// two-stage sibling; cudabackend/l2ahead.go's trAheadVariants lists them.
FT_TR_AHEAD(128, 3, 4)
FT_TR_AHEAD(128, 2, 4)
