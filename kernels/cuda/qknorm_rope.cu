// A Qwen3-style attention's per-head q/k RMSNorm, RoPE of q and k and
// KV-cache store as one kernel (kernels.NormRoPEStorer; the backend side is
// kernels/cudabackend/qknormrope.go).

// qknr_inv is how many inverse frequencies a thread of
// qknorm_rope_store_bf16 loads before its dependent-launch wait.
#define qknr_inv 4

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
//
// Latency: the norm weight chunk and the inverse frequencies a thread uses
// are loaded before ft_pdl_wait (constants of the model, written by no
// kernel of a step), so after the wait the chain holds one global read
// (the head) instead of three (head, then weight, then inv). That needs
// one 16-byte chunk a thread (d/8 ≤ blockDim.x, which normThreads gives up
// to d = 8192, where the backend declines wider heads) and so at most
// qknr_inv pairs a thread. The arithmetic is rmsnorm_row_v8's at that
// block size, expression for expression.
extern "C" __global__ void qknorm_rope_store_bf16(bf16_t* q, bf16_t* k, const bf16_t* v, bf16_t* kc, bf16_t* vc, const bf16_t* wq,
		const bf16_t* wk, int H, int K, int d, float eps, int capacity, const int* posp, int pos0, const float* inv) {
	extern __shared__ uint4 qknr_head[];
	__shared__ float sh[32];
	const int heads = H + K;
	const int t = blockIdx.x / heads, h = blockIdx.x - t * heads;
	const bool isq = h < H;
	const int kh = h - H;
	const int n8 = d >> 3, half = d >> 1;
	const bf16_t* w = isq ? wq : wk;
	uint4 wc = make_uint4(0u, 0u, 0u, 0u);
	float iv[qknr_inv];
	if ((int)threadIdx.x < n8) wc = reinterpret_cast<const uint4*>(w)[threadIdx.x];
#pragma unroll
	for (int j = 0; j < qknr_inv; j++) {
		const int i = threadIdx.x + j * blockDim.x;
		iv[j] = i < half ? inv[i] : 0.f;
	}
	ft_pdl_wait();
	bf16_t* x = isq ? q + ((usize)t * H + h) * d : k + ((usize)t * K + kh) * d;
	bf16_t* nx = (bf16_t*)qknr_head;
	{
		// rmsnorm_row_v8 with at most one chunk a thread and its weight
		// chunk in hand.
		const int c = threadIdx.x;
		float s = 0.f;
		float f[8];
		if (c < n8) {
			unpack8(reinterpret_cast<const uint4*>(x)[c], f);
#pragma unroll
			for (int e = 0; e < 8; e++) s += f[e] * f[e];
		}
		s = block_sum(s, sh);
		const float scale = rsqrtf(s / (float)d + eps);
		if (c < n8) {
			float g[8];
			unpack8(wc, g);
			uint4 r;
			r.x = pack_bf16(f[0] * scale * g[0], f[1] * scale * g[1]);
			r.y = pack_bf16(f[2] * scale * g[2], f[3] * scale * g[3]);
			r.z = pack_bf16(f[4] * scale * g[4], f[5] * scale * g[5]);
			r.w = pack_bf16(f[6] * scale * g[6], f[7] * scale * g[7]);
			reinterpret_cast<uint4*>(nx)[c] = r;
		}
	}
	__syncthreads(); // every thread's reads of x are done, and nx is whole
	const int p = ft_pos(posp, pos0) + t;
	const bool store = !isq && p >= 0 && p < capacity;
	const usize crow = store ? (usize)p * K * d + (usize)kh * d : 0;
#pragma unroll
	for (int j = 0; j < qknr_inv; j++) {
		const int i = threadIdx.x + j * blockDim.x;
		if (i < half) {
			bf16_t r0, r1;
			rope_rotate(bf2f(nx[i]), bf2f(nx[i + half]), p, iv[j], r0, r1);
			x[i] = r0;
			x[i + half] = r1;
			if (store) {
				kc[crow + i] = r0;
				kc[crow + i + half] = r1;
			}
		}
	}
	if (store) {
		const uint4* vs = (const uint4*)(v + ((usize)t * K + kh) * d);
		uint4* vd = (uint4*)(vc + crow);
		for (int c = threadIdx.x; c < (d >> 3); c += blockDim.x) vd[c] = vs[c];
	}
}
