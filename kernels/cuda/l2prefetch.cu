// L2 prefetch of weights (cudabackend/l2prefetch.go, kernels.L2Prefetcher):
// during the latency-bound kernels of a one-token decode step (RoPE and the
// KV store, decode attention, RMSNorm) HBM is nearly idle; a prefetch issued
// in front of them brings the next projection's weights into L2, so that
// GEMV then reads them from L2 instead of HBM.
//
// Ordering under programmatic dependent launch (common.cuh's ft_pdl_wait,
// cudabackend/pdl.go): the kernel reads nothing any kernel writes (weights
// are written only by uploads, before any step), and it writes nothing, so
// its prefetches need no wait and go out first, while the kernel before it
// in the stream may still be finishing. It then calls ft_pdl_wait before it
// exits: the kernel after it, launched the same way, waits in its own
// ft_pdl_wait for this grid to complete, and this grid completes only after
// each of its blocks has waited for the kernel before it; the chain of waits
// stays unbroken, as if this kernel were absent. A prefetch is only a hint:
// it changes no value any later kernel computes, whether or not the lines
// arrive before they are read.

// FT_L2PF_CHUNK is the bytes one bulk prefetch instruction asks for (a
// multiple of 16); each thread issues one chunk at a time.
#define FT_L2PF_CHUNK 16384

// l2_prefetch_weights: asks L2 to hold bytes [p, p+bytes) (no value
// written; bytes == 0 prefetches nothing). On sm_90 with CUDA 12 or later
// each thread issues cp.async.bulk.prefetch.L2 over chunks of FT_L2PF_CHUNK
// bytes (the range shrunk inward to 16-byte boundaries, as the instruction
// wants: at most 30 bytes at the edges are left out); otherwise (CUDA 11.8
// cannot assemble that instruction) one prefetch.global.L2 per 128-byte line
// the range touches, at an address inside the range (evict_normal, as the
// bulk path: an evict_last line would crowd L2 long after its one read).
// Any grid and block size; then ft_pdl_wait (see the top of this file).
extern "C" __global__ void l2_prefetch_weights(const char* p, unsigned long long bytes) {
	const unsigned long long a = (unsigned long long)p;
	const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
	const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDACC_VER_MAJOR__) && __CUDACC_VER_MAJOR__ >= 12
	const unsigned long long s = (a + 15) & ~15ull, e = (a + bytes) & ~15ull;
	if (bytes != 0 && e > s) {
		const unsigned long long n = (e - s + FT_L2PF_CHUNK - 1) / FT_L2PF_CHUNK;
		for (unsigned long long c = tid; c < n; c += stride) {
			const unsigned long long lo = s + c * FT_L2PF_CHUNK;
			const unsigned size = (unsigned)(e - lo < FT_L2PF_CHUNK ? e - lo : FT_L2PF_CHUNK);
			asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(lo), "r"(size) : "memory");
		}
	}
#elif defined(__CUDA_ARCH__)
	if (bytes != 0) {
		const unsigned long long first = a >> 7, last = (a + bytes - 1) >> 7;
		for (unsigned long long l = first + tid; l <= last; l += stride) {
			const unsigned long long at = l << 7 < a ? a : l << 7;
			asm volatile("prefetch.global.L2 [%0];" ::"l"(at) : "memory");
		}
	}
#endif
	ft_pdl_wait();
}
