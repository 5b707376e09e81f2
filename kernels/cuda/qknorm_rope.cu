// A Qwen3-style attention's per-head q/k RMSNorm, RoPE of q and k and
// KV-cache store as one kernel (kernels.NormRoPEStorer; the backend side is
// kernels/cudabackend/qknormrope.go).

// qknr_inv is how many inverse frequencies a thread of
// qknorm_rope_store_bf16 loads before its dependent-launch wait.
#define qknr_inv 4

// qknorm_rope_store_body (the two kernels below): block b = blockIdx.x takes head h = b mod (H+K)
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
//
// EARLY_IO (qknorm_rope_store_bf16, the default): the position is read
// before the wait too (as decode_tr.cu's PRE reads it: written by no
// kernel still running when this one's blocks start, common.cuh), and a k
// block loads its v chunk right after the wait, with the head, so neither
// read waits behind the norm (qknorm_rope_store_late_bf16, FT_QKNORM_EARLY=0,
// reads the position after the norm's barrier and v at the end, as the
// kernel did before). A one-warp block whose head's halves are whole
// chunks (Qwen3's d = 128) takes qknorm_rope_warp: no shared memory, no
// barrier, and the angles computed before the wait. Same bits.
// x_of is the head a block of qknorm_rope_store_body normalises.
__device__ __forceinline__ bf16_t* x_of(bf16_t* q, bf16_t* k, int t, int h, int H, int K, int kh, int d, bool isq) {
	return isq ? q + ((usize)t * H + h) * d : k + ((usize)t * K + kh) * d;
}

// qknorm_rope_warp is qknorm_rope_store_body's path for a block of one
// warp whose head's halves are whole chunks (d/8 ≤ 32, d % 16 == 0;
// Qwen3's d = 128: 16 chunks): lane c holds chunk c (values 8c … 8c+7),
// whose RoPE partners are chunk c ± d/16, fetched with a shuffle instead of
// shared memory; the 8 angles a lane needs are computed before the wait
// (rope_angle: the position is read before it, EARLY_IO), the v chunk
// loaded with the head, and the reduction is one warp's (block_sum over
// one warp adds only zeros to it: the same sum). Same bits: the same
// bf16 roundings of the normalised values, the same rope_apply.
__device__ __forceinline__ void qknorm_rope_warp(bf16_t* x, const bf16_t* v, bf16_t* kc, bf16_t* vc, uint4 wc,
		const float* inv, int t, int kh, int K, int d, float eps, int capacity, int p, bool isq) {
	const int c = threadIdx.x, n8 = d >> 3, h8 = n8 >> 1;
	const bool on = c < n8, lo = c < h8;
	const int pc = lo ? c + h8 : c - h8; // the partner chunk's lane
	const int i0 = 8 * (lo ? c : c - h8); // the pair index of the chunk's first value
	float sn[8], cs[8];
#pragma unroll
	for (int e = 0; e < 8; e++) {
		const float f = on ? inv[i0 + e] : 0.f;
		rope_angle(p, f, sn[e], cs[e]);
	}
	const bool store = !isq && p >= 0 && p < capacity;
	ft_pdl_wait();
	uint4 xc = make_uint4(0u, 0u, 0u, 0u), vv = make_uint4(0u, 0u, 0u, 0u);
	if (on) xc = reinterpret_cast<const uint4*>(x)[c];
	if (on && store) vv = reinterpret_cast<const uint4*>(v + ((usize)t * K + kh) * d)[c];
	float f[8];
	unpack8(xc, f);
	float s = 0.f;
	if (on) {
#pragma unroll
		for (int e = 0; e < 8; e++) s += f[e] * f[e];
	}
	s = warp_sum(s);
	const float scale = rsqrtf(s / (float)d + eps);
	float g[8];
	unpack8(wc, g);
	uint4 r;
	r.x = pack_bf16(f[0] * scale * g[0], f[1] * scale * g[1]);
	r.y = pack_bf16(f[2] * scale * g[2], f[3] * scale * g[3]);
	r.z = pack_bf16(f[4] * scale * g[4], f[5] * scale * g[5]);
	r.w = pack_bf16(f[6] * scale * g[6], f[7] * scale * g[7]);
	uint4 o;
	o.x = __shfl_sync(FT_FULL, r.x, pc);
	o.y = __shfl_sync(FT_FULL, r.y, pc);
	o.z = __shfl_sync(FT_FULL, r.z, pc);
	o.w = __shfl_sync(FT_FULL, r.w, pc);
	if (!on) return;
	float a[8], b[8];
	unpack8(lo ? r : o, a); // the first halves' values
	unpack8(lo ? o : r, b); // their partners, d/2 further
	unsigned y[4];
#pragma unroll
	for (int e = 0; e < 8; e += 2) {
		bf16_t r0, r1, u0, u1;
		rope_apply(a[e], b[e], sn[e], cs[e], r0, r1);
		rope_apply(a[e + 1], b[e + 1], sn[e + 1], cs[e + 1], u0, u1);
		y[e >> 1] = (unsigned)(lo ? r0 : r1) | ((unsigned)(lo ? u0 : u1) << 16);
	}
	const uint4 yc = make_uint4(y[0], y[1], y[2], y[3]);
	reinterpret_cast<uint4*>(x)[c] = yc;
	if (store) {
		const usize crow = (usize)p * K * d + (usize)kh * d;
		reinterpret_cast<uint4*>(kc + crow)[c] = yc;
		reinterpret_cast<uint4*>(vc + crow)[c] = vv;
	}
}

template <bool EARLY_IO>
__device__ __forceinline__ void qknorm_rope_store_body(bf16_t* q, bf16_t* k, const bf16_t* v, bf16_t* kc, bf16_t* vc,
		const bf16_t* wq, const bf16_t* wk, int H, int K, int d, float eps, int capacity, const int* posp, int pos0,
		const float* inv, uint4* qknr_head, float* sh) {
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
	int p = 0;
	if (EARLY_IO) p = ft_pos(posp, pos0) + t;
	if (EARLY_IO && blockDim.x == 32 && n8 <= 32 && (half & 7) == 0) {
		qknorm_rope_warp(x_of(q, k, t, h, H, K, kh, d, isq), v, kc, vc, wc, inv, t, kh, K, d, eps, capacity, p, isq);
		return;
	}
	ft_pdl_wait();
	bf16_t* x = x_of(q, k, t, h, H, K, kh, d, isq);
	bf16_t* nx = (bf16_t*)qknr_head;
	uint4 vv = make_uint4(0u, 0u, 0u, 0u);
	if (EARLY_IO && !isq && p >= 0 && p < capacity && (int)threadIdx.x < n8)
		vv = reinterpret_cast<const uint4*>(v + ((usize)t * K + kh) * d)[threadIdx.x];
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
	if (!EARLY_IO) p = ft_pos(posp, pos0) + t;
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
		uint4* vd = (uint4*)(vc + crow);
		if (EARLY_IO) {
			if ((int)threadIdx.x < n8) vd[threadIdx.x] = vv;
		} else {
			const uint4* vs = (const uint4*)(v + ((usize)t * K + kh) * d);
			for (int c = threadIdx.x; c < (d >> 3); c += blockDim.x) vd[c] = vs[c];
		}
	}
}

// qknorm_rope_store_bf16 is qknorm_rope_store_body with EARLY_IO (the
// default).
extern "C" __global__ void qknorm_rope_store_bf16(bf16_t* q, bf16_t* k, const bf16_t* v, bf16_t* kc, bf16_t* vc, const bf16_t* wq,
		const bf16_t* wk, int H, int K, int d, float eps, int capacity, const int* posp, int pos0, const float* inv) {
	extern __shared__ uint4 qknr_head[];
	__shared__ float sh[32];
	qknorm_rope_store_body<true>(q, k, v, kc, vc, wq, wk, H, K, d, eps, capacity, posp, pos0, inv, qknr_head, sh);
}

// qknorm_rope_store_late_bf16 is qknorm_rope_store_body without EARLY_IO
// (FT_QKNORM_EARLY=0).
extern "C" __global__ void qknorm_rope_store_late_bf16(bf16_t* q, bf16_t* k, const bf16_t* v, bf16_t* kc, bf16_t* vc, const bf16_t* wq,
		const bf16_t* wk, int H, int K, int d, float eps, int capacity, const int* posp, int pos0, const float* inv) {
	extern __shared__ uint4 qknr_head[];
	__shared__ float sh[32];
	qknorm_rope_store_body<false>(q, k, v, kc, vc, wq, wk, H, K, d, eps, capacity, posp, pos0, inv, qknr_head, sh);
}
