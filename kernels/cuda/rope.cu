// Rotary position embeddings (HF rotate_half pairing), default or llama3
// scaling alike: the scaling lives in the inverse-frequency table inv[d/2].

// rope_pair rotates (x[i], x[i+d/2]) of one head by θ = float(p)·inv[i]
// (cos and sin in fp32, full range reduction: within an ulp of the
// double-precision values the CPU rounds), writing the rotated pair to dst
// (x itself, and for keys also the cache row).
__device__ __forceinline__ void rope_pair(bf16_t* hp, bf16_t* dst2, int i, int half, int p, const float* inv) {
	const float th = __fmul_rn((float)p, inv[i]);
	float s, c;
	sincosf(th, &s, &c);
	const float a = bf2f(hp[i]), b = bf2f(hp[i + half]);
	const bf16_t r0 = f2bf(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
	const bf16_t r1 = f2bf(__fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s)));
	hp[i] = r0;
	hp[i + half] = r1;
	if (dst2) {
		dst2[i] = r0;
		dst2[i + half] = r1;
	}
}

// rope_bf16: x[T,H,d] in place, token t = blockIdx.x at position p = pos+t:
// for i < d/2, θ = p·inv[i], (x[i], x[i+d/2]) ← (x[i]·cosθ − x[i+d/2]·sinθ,
// x[i+d/2]·cosθ + x[i]·sinθ). The pairs of a token spread over gridDim.y
// blocks.
extern "C" __global__ void rope_bf16(bf16_t* x, int H, int d, const int* posp, int pos0, const float* inv) {
	ft_pdl_wait();
	const int t = blockIdx.x, half = d >> 1;
	const int p = ft_pos(posp, pos0) + t;
	bf16_t* row = x + (usize)t * H * d;
	for (int j = blockIdx.y * blockDim.x + threadIdx.x; j < H * half; j += gridDim.y * blockDim.x) {
		const int h = j / half;
		rope_pair(row + h * d, 0, j - h * half, half, p, inv);
	}
}

// rope_store_bf16 fuses a step's RoPE and KV-cache writes: for token
// t = blockIdx.x at position p = pos+t, q[t] (H heads) and k[t] (K heads) are
// rotated in place as rope_bf16 does, the rotated k[t] also lands in kc[p],
// and vc[p] = v[t] (rows of K·d values). Positions at or past capacity are
// not stored. The work of a token spreads over gridDim.y blocks.
extern "C" __global__ void rope_store_bf16(bf16_t* q, bf16_t* k, const bf16_t* v, bf16_t* kc, bf16_t* vc,
		int H, int K, int d, int capacity, const int* posp, int pos0, const float* inv) {
	ft_pdl_wait();
	const int t = blockIdx.x, half = d >> 1;
	const int p = ft_pos(posp, pos0) + t;
	const bool store = p >= 0 && p < capacity;
	const int row = K * d;
	bf16_t* qr = q + (usize)t * H * d;
	bf16_t* kr = k + (usize)t * row;
	const int pairs = (H + K) * half;
	for (int j = blockIdx.y * blockDim.x + threadIdx.x; j < pairs + row; j += gridDim.y * blockDim.x) {
		if (j < H * half) {
			const int h = j / half;
			rope_pair(qr + h * d, 0, j - h * half, half, p, inv);
		} else if (j < pairs) {
			const int h = (j - H * half) / half, i = j - H * half - h * half;
			rope_pair(kr + h * d, store ? kc + (usize)p * row + h * d : 0, i, half, p, inv);
		} else if (store) {
			const int e = j - pairs;
			vc[(usize)p * row + e] = v[(usize)t * row + e];
		}
	}
}

// rope_store_paged_bf16 is rope_store_bf16 for a batch's packed tokens at
// unrelated positions and pool rows: token t = blockIdx.x sits at position
// ps[2t] and its rotated key and its value land in pool row ps[2t+1] of kc
// and vc [P,K,d] (the host checks the rows). q[t] (H heads) and k[t] (K
// heads) are rotated in place as rope_bf16 does. The work of a token spreads
// over gridDim.y blocks.
extern "C" __global__ void rope_store_paged_bf16(bf16_t* q, bf16_t* k, const bf16_t* v, bf16_t* kc, bf16_t* vc,
		int H, int K, int d, const int* ps, const float* inv) {
	ft_pdl_wait();
	const int t = blockIdx.x, half = d >> 1;
	const int p = ps[2 * t];
	const usize slot = (usize)ps[2 * t + 1];
	const int row = K * d;
	bf16_t* qr = q + (usize)t * H * d;
	bf16_t* kr = k + (usize)t * row;
	const int pairs = (H + K) * half;
	for (int j = blockIdx.y * blockDim.x + threadIdx.x; j < pairs + row; j += gridDim.y * blockDim.x) {
		if (j < H * half) {
			const int h = j / half;
			rope_pair(qr + h * d, 0, j - h * half, half, p, inv);
		} else if (j < pairs) {
			const int h = (j - H * half) / half, i = j - H * half - h * half;
			rope_pair(kr + h * d, kc + slot * row + h * d, i, half, p, inv);
		} else {
			const int e = j - pairs;
			vc[slot * row + e] = v[(usize)t * row + e];
		}
	}
}
