// A Qwen3-style attention's per-head q/k RMSNorm, RoPE of q and k and
// KV-cache store as one kernel (kernels.NormRoPEStorer; the backend side is
// kernels/cudabackend/qknormrope.go).

// qknorm_rope_store_bf16: block b = blockIdx.x takes head h = b mod (H+K)
// of token t = b div (H+K), at position p = pos + t: q head h of q[T,H,d]
// when h < H, else k head h−H of k[T,K,d]. It normalises the head's d
// values with weight wq or wk as rmsnorm_pair_bf16_v8 does
// (rmsnorm_row_v8 at the same block size: the same sums, the same bf16
// rounding), into shared memory; then rotates the pairs (i, i+d/2) of the
// normalised head by θ = p·inv[i] with rope_rotate, as rope_store_bf16
// does, writing them back in place. A k block whose p is inside the cache
// (0 ≤ p < capacity) also writes its rotated head into kc[p] and copies
// the v head into vc[p] (rows of K·d values). So q, k and the caches get
// the bits of rmsnorm_pair_bf16_v8 then rope_store_bf16. d % 8 == 0, every
// row 16-byte aligned; dynamic shared memory of d bf16 values.
extern "C" __global__ void qknorm_rope_store_bf16(bf16_t* q, bf16_t* k, const bf16_t* v, bf16_t* kc, bf16_t* vc, const bf16_t* wq,
		const bf16_t* wk, int H, int K, int d, float eps, int capacity, const int* posp, int pos0, const float* inv) {
	extern __shared__ uint4 qknr_head[];
	__shared__ float sh[32];
	ft_pdl_wait();
	const int heads = H + K;
	const int t = blockIdx.x / heads, h = blockIdx.x - t * heads;
	const bool isq = h < H;
	const int kh = h - H;
	bf16_t* x = isq ? q + ((usize)t * H + h) * d : k + ((usize)t * K + kh) * d;
	bf16_t* nx = (bf16_t*)qknr_head;
	rmsnorm_row_v8(nx, x, isq ? wq : wk, d, eps, sh);
	__syncthreads(); // every thread's reads of x are done, and nx is whole
	const int p = ft_pos(posp, pos0) + t, half = d >> 1;
	const bool store = !isq && p >= 0 && p < capacity;
	const usize crow = store ? (usize)p * K * d + (usize)kh * d : 0;
	for (int i = threadIdx.x; i < half; i += blockDim.x) {
		bf16_t r0, r1;
		rope_rotate(bf2f(nx[i]), bf2f(nx[i + half]), p, inv[i], r0, r1);
		x[i] = r0;
		x[i + half] = r1;
		if (store) {
			kc[crow + i] = r0;
			kc[crow + i + half] = r1;
		}
	}
	if (store) {
		const uint4* vs = (const uint4*)(v + ((usize)t * K + kh) * d);
		uint4* vd = (uint4*)(vc + crow);
		for (int c = threadIdx.x; c < (d >> 3); c += blockDim.x) vd[c] = vs[c];
	}
}
