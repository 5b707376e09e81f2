// Rotary position embeddings (HF rotate_half pairing), default or llama3
// scaling alike: the scaling lives in the inverse-frequency table inv[d/2].

// rope_pair rotates (x[i], x[i+d/2]) of one head by θ = float(p)·inv[i]
// (rope_rotate), writing the rotated pair to dst (x itself, and for keys
// also the cache row).
__device__ __forceinline__ void rope_pair(bf16_t* hp, bf16_t* dst2, int i, int half, int p, const float* inv) {
	bf16_t r0, r1;
	rope_rotate(bf2f(hp[i]), bf2f(hp[i + half]), p, inv[i], r0, r1);
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

// rope_store_rows is rope_store_bf16's work (after its ft_pdl_wait) for
// the step's first position p0.
__device__ __forceinline__ void rope_store_rows(bf16_t* q, bf16_t* k, const bf16_t* v, bf16_t* kc, bf16_t* vc, int H, int K, int d,
		int capacity, int p0, const float* inv) {
	const int t = blockIdx.x, half = d >> 1;
	const int p = p0 + t;
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

// rope_store_bf16 fuses a step's RoPE and KV-cache writes: for token
// t = blockIdx.x at position p = pos+t, q[t] (H heads) and k[t] (K heads) are
// rotated in place as rope_bf16 does, the rotated k[t] also lands in kc[p],
// and vc[p] = v[t] (rows of K·d values). Positions at or past capacity are
// not stored. The work of a token spreads over gridDim.y blocks.
extern "C" __global__ void rope_store_bf16(bf16_t* q, bf16_t* k, const bf16_t* v, bf16_t* kc, bf16_t* vc,
		int H, int K, int d, int capacity, const int* posp, int pos0, const float* inv) {
	ft_pdl_wait();
	rope_store_rows(q, k, v, kc, vc, H, K, d, capacity, ft_pos(posp, pos0), inv);
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

// rope_store_v8_row is one token's work of rope_store_v8_bf16 and
// rope_store_paged_v8_bf16: the token at position p has q row qr (H heads),
// k row kr and v row vr (K heads each, d wide); q and k are rotated in place
// (the same rounding steps as rope_pair, so the same bits), and when kdst is
// set the rotated k row also lands at kdst and v's at vdst. cos and sin of
// θ_i = p·inv[i] are computed once per token into cs (d/2 entries of shared
// memory) instead of once per head; every access moves 8 values (16 bytes).
// Needs d % 16 == 0 and 16-byte aligned rows.
__device__ __forceinline__ void rope_store_v8_row(bf16_t* qr, bf16_t* kr, const bf16_t* vr, bf16_t* kdst, bf16_t* vdst, int H, int K,
		int d, int p, const float* inv, float2* cs) {
	const int half = d >> 1, oct = half >> 3;
	for (int i = threadIdx.x; i < half; i += blockDim.x) {
		float s, c;
		sincosf(__fmul_rn((float)p, inv[i]), &s, &c);
		cs[i] = make_float2(c, s);
	}
	__syncthreads();
	const int nq = H * oct, nqk = nq + K * oct, n = nqk + (vdst ? K * d / 8 : 0);
	for (int j = threadIdx.x; j < n; j += blockDim.x) {
		if (j < nqk) {
			const bool isq = j < nq;
			const int jj = isq ? j : j - nq;
			const int h = jj / oct, i0 = (jj - h * oct) * 8;
			bf16_t* hp = (isq ? qr : kr) + (usize)h * d;
			const uint4 ua = *(const uint4*)(hp + i0), ub = *(const uint4*)(hp + half + i0);
			const unsigned a[4] = {ua.x, ua.y, ua.z, ua.w}, b[4] = {ub.x, ub.y, ub.z, ub.w};
			unsigned ra[4], rb[4];
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const float2 c0 = cs[i0 + 2 * e], c1 = cs[i0 + 2 * e + 1];
				const float a0 = __uint_as_float(a[e] << 16), a1 = __uint_as_float(a[e] & 0xffff0000u);
				const float b0 = __uint_as_float(b[e] << 16), b1 = __uint_as_float(b[e] & 0xffff0000u);
				const bf16_t x0 = f2bf(__fsub_rn(__fmul_rn(a0, c0.x), __fmul_rn(b0, c0.y)));
				const bf16_t x1 = f2bf(__fsub_rn(__fmul_rn(a1, c1.x), __fmul_rn(b1, c1.y)));
				const bf16_t y0 = f2bf(__fadd_rn(__fmul_rn(b0, c0.x), __fmul_rn(a0, c0.y)));
				const bf16_t y1 = f2bf(__fadd_rn(__fmul_rn(b1, c1.x), __fmul_rn(a1, c1.y)));
				ra[e] = (unsigned)x0 | ((unsigned)x1 << 16);
				rb[e] = (unsigned)y0 | ((unsigned)y1 << 16);
			}
			const uint4 oa = make_uint4(ra[0], ra[1], ra[2], ra[3]), ob = make_uint4(rb[0], rb[1], rb[2], rb[3]);
			*(uint4*)(hp + i0) = oa;
			*(uint4*)(hp + half + i0) = ob;
			if (!isq && kdst) {
				*(uint4*)(kdst + (usize)h * d + i0) = oa;
				*(uint4*)(kdst + (usize)h * d + half + i0) = ob;
			}
		} else {
			const int e = (j - nqk) * 8;
			*(uint4*)(vdst + e) = *(const uint4*)(vr + e);
		}
	}
}

// rope_store_v8_bf16 is rope_store_bf16 with 16-byte accesses and one
// cos/sin per (token, frequency): token t = blockIdx.x, d % 16 == 0, rows
// 16-byte aligned, dynamic shared memory d/2 float2. Positions at or past
// capacity are rotated but not stored.
extern "C" __global__ void rope_store_v8_bf16(bf16_t* q, bf16_t* k, const bf16_t* v, bf16_t* kc, bf16_t* vc, int H, int K, int d,
		int capacity, const int* posp, int pos0, const float* inv) {
	extern __shared__ float2 rope_cs[];
	ft_pdl_wait();
	const int t = blockIdx.x, p = ft_pos(posp, pos0) + t;
	const bool store = p >= 0 && p < capacity;
	const usize row = (usize)K * d;
	rope_store_v8_row(q + (usize)t * H * d, k + (usize)t * row, v + (usize)t * row, store ? kc + (usize)p * row : 0,
		store ? vc + (usize)p * row : 0, H, K, d, p, inv, rope_cs);
}

// rope_store_paged_v8_bf16 is rope_store_paged_bf16 with rope_store_v8_bf16's
// accesses: token t = blockIdx.x at position ps[2t], stored at pool row
// ps[2t+1].
extern "C" __global__ void rope_store_paged_v8_bf16(bf16_t* q, bf16_t* k, const bf16_t* v, bf16_t* kc, bf16_t* vc, int H, int K,
		int d, const int* ps, const float* inv) {
	extern __shared__ float2 rope_cs[];
	ft_pdl_wait();
	const int t = blockIdx.x;
	const usize row = (usize)K * d, slot = (usize)ps[2 * t + 1];
	rope_store_v8_row(q + (usize)t * H * d, k + (usize)t * row, v + (usize)t * row, kc + slot * row, vc + slot * row, H, K, d,
		ps[2 * t], inv, rope_cs);
}
