// L2 prefetch on a graph branch (cudabackend/l2branch.go, FT_L2_BRANCH):
// launched on a second stream forked off the compute stream right after the
// kernel in front of a latency-bound stretch of a decode step (RoPE and
// attention, an RMSNorm), so it runs on the SMs those leave idle and fills
// the idle HBM time with the next projection's weight bytes. Nothing on the
// compute stream waits for it until the join at the end of the layer.
//
// Not launched with programmatic dependent launch and no ft_pdl_wait: it
// reads nothing any kernel writes (weights are written only by uploads,
// before any step) and writes nothing. A prefetch is only a hint.

// FT_L2BR_CHUNK is the bytes one bulk prefetch instruction asks for (a
// multiple of 16).
#define FT_L2BR_CHUNK 4096

// l2br_region asks L2 for bytes [p, p+n) with threads tid of stride:
// mode 0 bulk (cp.async.bulk.prefetch.L2 over FT_L2BR_CHUNK chunks, the
// range shrunk inward to 16-byte boundaries, on sm_90 with CUDA 12 or
// later; otherwise as mode 1), mode 1 one prefetch.global.L2 per 128-byte
// line the range touches, mode 2 the same with the evict_last policy.
__device__ __forceinline__ void l2br_region(const char* p, unsigned long long n, int mode, unsigned long long tid,
		unsigned long long stride) {
	if (n == 0)
		return;
	const unsigned long long a = (unsigned long long)p;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDACC_VER_MAJOR__) && __CUDACC_VER_MAJOR__ >= 12
	if (mode == 0) {
		const unsigned long long s = (a + 15) & ~15ull, e = (a + n) & ~15ull;
		if (e > s) {
			const unsigned long long chunks = (e - s + FT_L2BR_CHUNK - 1) / FT_L2BR_CHUNK;
			for (unsigned long long c = tid; c < chunks; c += stride) {
				const unsigned long long lo = s + c * FT_L2BR_CHUNK;
				const unsigned size = (unsigned)(e - lo < FT_L2BR_CHUNK ? e - lo : FT_L2BR_CHUNK);
				asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(lo), "r"(size) : "memory");
			}
		}
		return;
	}
#endif
	const unsigned long long first = a >> 7, last = (a + n - 1) >> 7;
	for (unsigned long long l = first + tid; l <= last; l += stride) {
		const unsigned long long at = (l << 7) < a ? a : (l << 7);
		if (mode == 2)
			asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(at) : "memory");
		else
			asm volatile("prefetch.global.L2 [%0];" ::"l"(at) : "memory");
	}
}

// l2_branch_prefetch asks L2 for up to three regions [p_i, p_i + n_i)
// (n_i == 0: none) in the given mode; any grid and block size.
extern "C" __global__ void l2_branch_prefetch(const char* p0, unsigned long long n0, const char* p1,
		unsigned long long n1, const char* p2, unsigned long long n2, int mode) {
	const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
	const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
	l2br_region(p0, n0, mode, tid, stride);
	l2br_region(p1, n1, mode, tid, stride);
	l2br_region(p2, n2, mode, tid, stride);
}
