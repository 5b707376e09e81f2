// Attention over a paged KV cache (kernels.PagedKV): the keys and values of
// a batch's sequences sit in pools [P,K,d] of blocks of bs positions, and
// position p of sequence s is pool row table[s·maxBlocks + p/bs]·bs + p%bs.
// The kernels are attention.cu's with each cache row read through the block
// table instead of at row p; their math (base-2 softmax on scores
// pre-multiplied by log2(e)/√d, window lo = max(0, P−window+1)) is the same.
//
// The split kernels take a query row list rows[2t], rows[2t+1] = (the
// sequence of query row t, its position): the query at position P sees its
// sequence's positions lo..P. Decode is one row per sequence at position
// SeqLens[s]−1; a prefill without the flash kernel lists every query row.

// paged_row is the pool row of position p of the sequence whose block
// table row is tab.
__device__ __forceinline__ usize paged_row(const int* tab, int bs, int p) { return (usize)tab[p / bs] * bs + (usize)(p % bs); }

// attn_paged_split_bf16 is attn_split_bf16 over a paged cache (any head
// width D % 8 == 0, G ≤ 16): block (kvh, s, t) = (blockIdx.x, .y, .z) takes
// split s of query row t's visible positions and writes the same partials
// po[t,s,h,:] and pml[t,s,h] for attn_combine_bf16. Dynamic shared memory:
// (G·D + G·blockDim.x + 3·G) floats.
extern "C" __global__ void attn_paged_split_bf16(float* po, float* pml, const bf16_t* q, const bf16_t* kc, const bf16_t* vc,
		int H, int K, int D, int nsplit, const int* rows, const int* table, int maxBlocks, int bs, float scale_log2, int window) {
	extern __shared__ float sm[];
	const int kvh = blockIdx.x, split = blockIdx.y, t = blockIdx.z;
	const int G = H / K, NT = blockDim.x, tid = threadIdx.x;
	const int* tab = table + (usize)rows[2 * t] * maxBlocks;
	const int n = rows[2 * t + 1] + 1;
	const int lo = window > 0 ? max(0, n - window) : 0;
	const int chunk = (n - lo + nsplit - 1) / nsplit;
	const int beg = lo + split * chunk, end = min(n, beg + chunk);
	float* qs = sm;           // [G][D] scaled queries
	float* sc = qs + G * D;   // [G][NT] scores, then probabilities; at the end [nsub][G][D] partial sums
	float* st_m = sc + G * NT;
	float* st_l = st_m + G;
	float* st_a = st_l + G;
	const usize rs = (usize)K * D;  // elements between rows of the pools
	const bf16_t* qrow = q + ((usize)t * H + (usize)kvh * G) * D;
	for (int j = tid; j < G * D; j += NT) qs[j] = bf2f(qrow[j]) * scale_log2;
	if (tid < G) {
		st_m[tid] = -FT_INF;
		st_l[tid] = 0.f;
		st_a[tid] = 0.f;
	}
	const int nsub = NT / D > 0 ? NT / D : 1;
	const int dim = tid % D, sub = tid / D;
	const bool pv = sub < nsub && dim < D && tid < nsub * D;
	float acc[ATTN_MAXG];
#pragma unroll
	for (int g = 0; g < ATTN_MAXG; g++) acc[g] = 0.f;
	__syncthreads();
	const int lane = tid & 31, wid = tid >> 5, nw = NT >> 5;
	for (int p0 = beg; p0 < end; p0 += NT) {
		const int cnt = min(NT, end - p0);
		if (tid < cnt) {
			const bf16_t* kr = kc + paged_row(tab, bs, p0 + tid) * rs + (usize)kvh * D;
			float s[ATTN_MAXG];
#pragma unroll
			for (int g = 0; g < ATTN_MAXG; g++) s[g] = 0.f;
			for (int c = 0; c < D; c += 8) {
				float kf[8];
				unpack8(*(const uint4*)(kr + c), kf);
#pragma unroll
				for (int g = 0; g < ATTN_MAXG; g++) {
					if (g < G) {
						const float* qg = qs + g * D + c;
#pragma unroll
						for (int e = 0; e < 8; e++) s[g] += qg[e] * kf[e];
					}
				}
			}
#pragma unroll
			for (int g = 0; g < ATTN_MAXG; g++)
				if (g < G) sc[g * NT + tid] = s[g];
		}
		__syncthreads();
		for (int g = wid; g < G; g += nw) {
			float mx = -FT_INF;
			for (int i = lane; i < cnt; i += 32) mx = fmaxf(mx, sc[g * NT + i]);
			mx = warp_max(mx);
			const float mold = st_m[g], mnew = fmaxf(mold, mx);
			float sum = 0.f;
			for (int i = lane; i < cnt; i += 32) {
				const float e = exp2f(sc[g * NT + i] - mnew);
				sc[g * NT + i] = e;
				sum += e;
			}
			sum = warp_sum(sum);
			if (lane == 0) {
				const float a = exp2f(mold - mnew);
				st_a[g] = a;
				st_l[g] = st_l[g] * a + sum;
				st_m[g] = mnew;
			}
		}
		__syncthreads();
		if (pv) {
#pragma unroll
			for (int g = 0; g < ATTN_MAXG; g++)
				if (g < G) acc[g] *= st_a[g];
			for (int i = sub; i < cnt; i += nsub) {
				const float vv = bf2f(vc[paged_row(tab, bs, p0 + i) * rs + (usize)kvh * D + dim]);
#pragma unroll
				for (int g = 0; g < ATTN_MAXG; g++)
					if (g < G) acc[g] += sc[g * NT + i] * vv;
			}
		}
		__syncthreads();
	}
	if (pv) {
#pragma unroll
		for (int g = 0; g < ATTN_MAXG; g++)
			if (g < G) sc[(sub * G + g) * D + dim] = acc[g];
	}
	__syncthreads();
	const usize base = ((usize)t * nsplit + split) * H + (usize)kvh * G;
	for (int j = tid; j < G * D; j += NT) {
		const int g = j / D, dd = j - g * D;
		float o = 0.f;
		for (int s = 0; s < nsub; s++) o += sc[(s * G + g) * D + dd];
		po[(base + g) * D + dd] = o;
	}
	if (tid < G) {
		pml[(base + tid) * 2] = st_m[tid];
		pml[(base + tid) * 2 + 1] = st_l[tid];
	}
}

// paged_decode_body is attn_decode_body over a paged cache: head width HD
// (64 or 128), query row t = blockIdx.z as in attn_paged_split_bf16, the
// keys and values of up to 64 positions at a time staged in shared memory
// by one wave of async copies (16 bytes each, every row's address read
// through the block table); 128 threads. Same partials.
template <int HD>
__device__ __forceinline__ void paged_decode_body(float* po, float* pml, const bf16_t* q, const bf16_t* kc, const bf16_t* vc,
		int H, int K, int nsplit, const int* rows, const int* table, int maxBlocks, int bs, float scale_log2, int window) {
	constexpr int CH = 64, LD = HD + 8, NT = 128, NSUB = NT / HD;
	__shared__ __attribute__((aligned(16))) bf16_t Ks[CH * LD];
	__shared__ __attribute__((aligned(16))) bf16_t Vs[CH * LD];
	__shared__ float qs[ATTN_MAXG * HD];
	__shared__ float sc[ATTN_MAXG * CH];
	__shared__ float st_m[ATTN_MAXG], st_l[ATTN_MAXG], st_a[ATTN_MAXG];
	const int kvh = blockIdx.x, split = blockIdx.y, t = blockIdx.z;
	const int G = H / K, tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
	const int* tab = table + (usize)rows[2 * t] * maxBlocks;
	const int n = rows[2 * t + 1] + 1;
	const int lo = window > 0 ? max(0, n - window) : 0;
	const int chunk = (n - lo + nsplit - 1) / nsplit;
	const int beg = lo + split * chunk, end = min(n, beg + chunk);
	const usize rs = (usize)K * HD;
	const bf16_t* qrow = q + ((usize)t * H + (usize)kvh * G) * HD;
	for (int j = tid; j < G * HD; j += NT) qs[j] = bf2f(qrow[j]) * scale_log2;
	if (tid < G) {
		st_m[tid] = -FT_INF;
		st_l[tid] = 0.f;
		st_a[tid] = 0.f;
	}
	const int dim = tid % HD, sub = tid / HD;
	float acc[ATTN_MAXG];
#pragma unroll
	for (int g = 0; g < ATTN_MAXG; g++) acc[g] = 0.f;
	__syncthreads();
	for (int p0 = beg; p0 < end; p0 += CH) {
		const int cnt = min(CH, end - p0);
		for (int c = tid; c < CH * (HD / 8); c += NT) {
			const int r = c / (HD / 8), cc = (c % (HD / 8)) * 8;
			if (r < cnt) {
				const usize off = paged_row(tab, bs, p0 + r) * rs + (usize)kvh * HD + cc;
				cp_async16(Ks + r * LD + cc, kc + off);
				cp_async16(Vs + r * LD + cc, vc + off);
			}
		}
		cp_async_commit();
		cp_async_wait0();
		__syncthreads();
		{
			const int p = tid >> 1, hf = tid & 1;
			float s[ATTN_MAXG];
#pragma unroll
			for (int g = 0; g < ATTN_MAXG; g++) s[g] = 0.f;
			if (p < cnt) {
				const bf16_t* kr = Ks + p * LD;
#pragma unroll
				for (int cc = 0; cc < HD / 16; cc++) {
					const int c = cc * 16 + hf * 8;  // interleaved halves: no bank conflicts
					float kf[8];
					unpack8(*(const uint4*)(kr + c), kf);
#pragma unroll
					for (int g = 0; g < ATTN_MAXG; g++) {
						if (g < G) {
							const float* qg = qs + g * HD + c;
#pragma unroll
							for (int e = 0; e < 8; e++) s[g] += qg[e] * kf[e];
						}
					}
				}
			}
#pragma unroll
			for (int g = 0; g < ATTN_MAXG; g++) s[g] += __shfl_xor_sync(FT_FULL, s[g], 1);
			if (hf == 0 && p < cnt) {
#pragma unroll
				for (int g = 0; g < ATTN_MAXG; g++)
					if (g < G) sc[g * CH + p] = s[g];
			}
		}
		__syncthreads();
		for (int g = wid; g < G; g += NT / 32) {
			float mx = -FT_INF;
			for (int i = lane; i < cnt; i += 32) mx = fmaxf(mx, sc[g * CH + i]);
			mx = warp_max(mx);
			const float mold = st_m[g], mnew = fmaxf(mold, mx);
			float sum = 0.f;
			for (int i = lane; i < cnt; i += 32) {
				const float e = exp2f(sc[g * CH + i] - mnew);
				sc[g * CH + i] = e;
				sum += e;
			}
			sum = warp_sum(sum);
			if (lane == 0) {
				const float a = exp2f(mold - mnew);
				st_a[g] = a;
				st_l[g] = st_l[g] * a + sum;
				st_m[g] = mnew;
			}
		}
		__syncthreads();
#pragma unroll
		for (int g = 0; g < ATTN_MAXG; g++)
			if (g < G) acc[g] *= st_a[g];
		for (int i = sub; i < cnt; i += NSUB) {
			const float vv = bf2f(Vs[i * LD + dim]);
#pragma unroll
			for (int g = 0; g < ATTN_MAXG; g++)
				if (g < G) acc[g] += sc[g * CH + i] * vv;
		}
		__syncthreads();
	}
	float* red = (float*)Ks;  // free now: NSUB·G·HD ≤ 2048 floats
#pragma unroll
	for (int g = 0; g < ATTN_MAXG; g++)
		if (g < G) red[(sub * G + g) * HD + dim] = acc[g];
	__syncthreads();
	const usize base = ((usize)t * nsplit + split) * H + (usize)kvh * G;
	for (int j = tid; j < G * HD; j += NT) {
		const int g = j / HD, dd = j - g * HD;
		float o = 0.f;
#pragma unroll
		for (int s = 0; s < NSUB; s++) o += red[(s * G + g) * HD + dd];
		po[(base + g) * HD + dd] = o;
	}
	if (tid < G) {
		pml[(base + tid) * 2] = st_m[tid];
		pml[(base + tid) * 2 + 1] = st_l[tid];
	}
}

// attn_paged_decode_d64_bf16 is paged_decode_body for head width 64: grid
// (K, nsplit, rows), 128 threads; partials for attn_combine_bf16.
extern "C" __global__ void __launch_bounds__(128) attn_paged_decode_d64_bf16(float* po, float* pml, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int H, int K, int nsplit, const int* rows, const int* table, int maxBlocks, int bs, float scale_log2, int window) {
	paged_decode_body<64>(po, pml, q, kc, vc, H, K, nsplit, rows, table, maxBlocks, bs, scale_log2, window);
}

// attn_paged_decode_d128_bf16 is paged_decode_body for head width 128.
extern "C" __global__ void __launch_bounds__(128) attn_paged_decode_d128_bf16(float* po, float* pml, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int H, int K, int nsplit, const int* rows, const int* table, int maxBlocks, int bs, float scale_log2, int window) {
	paged_decode_body<128>(po, pml, q, kc, vc, H, K, nsplit, rows, table, maxBlocks, bs, scale_log2, window);
}

// flash_load_paged is flash_load with position p read from pool row
// paged_row(tab, bs, p): rows at or past kvEnd are zero-filled and their
// table entries never read.
template <int HD>
__device__ __forceinline__ void flash_load_paged(bf16_t* dst, const bf16_t* src, usize rs, int kvh, int j0, int kvEnd, const int* tab, int bs) {
	constexpr int LD = HD + 8, CPR = HD / 8;
	for (int c = threadIdx.x; c < 64 * CPR; c += blockDim.x) {
		const int r = c / CPR, cc = (c - r * CPR) * 8;
		bf16_t* d = dst + r * LD + cc;
		const int p = j0 + r;
		if (p < kvEnd) cp_async16(d, src + paged_row(tab, bs, p) * rs + (usize)kvh * HD + cc);
		else *(uint4*)d = make_uint4(0u, 0u, 0u, 0u);
	}
}

// varlen_flash_body is flash_body over packed sequences and a paged cache:
// block (blockIdx.x, h) takes query tile tiles[2·blockIdx.x+1] (64 rows) of
// sequence s = tiles[2·blockIdx.x], whose n_s = qStarts[s+1]−qStarts[s]
// queries are rows qStarts[s].. of q and out, at positions lens[s]−n_s..
// lens[s]−1; keys and values are that sequence's, read through its block
// table. The host lists the tiles longest first. Same math as flash_body.
template <int HD>
__device__ __forceinline__ void varlen_flash_body(bf16_t* out, const bf16_t* q, const bf16_t* kc, const bf16_t* vc,
		int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table, int maxBlocks, int bs,
		float scale_log2, int window) {
	constexpr int BN = 64, LD = HD + 8;
	constexpr int KS = HD / 16;  // k-steps of S over the head dimension
	constexpr int NB = BN / 8;   // 8-key column blocks of S
	constexpr int ND = HD / 8;   // 8-wide column blocks of O
	__shared__ __attribute__((aligned(16))) bf16_t Ks[BN * LD];
	__shared__ __attribute__((aligned(16))) bf16_t Vs[BN * LD];
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int g = lane >> 2, tg = lane & 3;
	const int seq = tiles[2 * blockIdx.x], qtile = tiles[2 * blockIdx.x + 1];
	const int q0 = qStarts[seq], T = qStarts[seq + 1] - q0;
	const int pos = lens[seq] - T;
	const int* tab = table + (usize)seq * maxBlocks;
	const int h = blockIdx.y, kvh = h / (H / K);
	const int t0 = qtile * 64 + warp * 16;
	const usize qs = (usize)H * HD;  // elements between tokens of q and out
	const usize rs = (usize)K * HD;  // elements between rows of the pools
	q += (usize)q0 * qs;
	out += (usize)q0 * qs;

	unsigned qf[KS][4];
	{
		const int r0 = t0 + g, r1 = r0 + 8;
		const bf16_t* q0p = q + (usize)r0 * qs + (usize)h * HD;
		const bf16_t* q1p = q + (usize)r1 * qs + (usize)h * HD;
#pragma unroll
		for (int kk = 0; kk < KS; kk++) {
			const int c = kk * 16 + 2 * tg;
			qf[kk][0] = r0 < T ? *(const unsigned*)(q0p + c) : 0u;
			qf[kk][1] = r1 < T ? *(const unsigned*)(q1p + c) : 0u;
			qf[kk][2] = r0 < T ? *(const unsigned*)(q0p + c + 8) : 0u;
			qf[kk][3] = r1 < T ? *(const unsigned*)(q1p + c + 8) : 0u;
		}
	}
	float o[ND][4];
#pragma unroll
	for (int nd = 0; nd < ND; nd++) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.f;
	float m0 = -FT_INF, m1 = -FT_INF, l0 = 0.f, l1 = 0.f;
	const int lastRow = min(T, qtile * 64 + 64) - 1;
	const int kvEnd = pos + lastRow + 1;
	const int ntiles = (kvEnd + BN - 1) / BN;
	const int qp0 = pos + t0 + g, qp1 = qp0 + 8;
	const int lo0 = window > 0 ? qp0 - window + 1 : 0, lo1 = window > 0 ? qp1 - window + 1 : 0;
	const int jfirst = window > 0 ? max(0, pos + qtile * 64 - window + 1) / BN : 0;

	flash_load_paged<HD>(Ks, kc, rs, kvh, jfirst * BN, kvEnd, tab, bs);
	cp_async_commit();
	for (int j = jfirst; j < ntiles; j++) {
		const int j0 = j * BN;
		flash_load_paged<HD>(Vs, vc, rs, kvh, j0, kvEnd, tab, bs);
		cp_async_commit();
		cp_async_wait1();
		__syncthreads();  // K tile j is in shared memory

		float s[NB][4];
#pragma unroll
		for (int nb = 0; nb < NB; nb++) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
#pragma unroll
		for (int kk = 0; kk < KS; kk++) {
#pragma unroll
			for (int nb = 0; nb < NB; nb += 2) {
				unsigned b0, b1, b2, b3;
				const int row = nb * 8 + (lane & 7) + ((lane >> 4) << 3);
				const int col = kk * 16 + ((lane >> 3) & 1) * 8;
				ldmatrix_x4(b0, b1, b2, b3, Ks + row * LD + col);
				mma_bf16(s[nb], qf[kk], b0, b1);
				mma_bf16(s[nb + 1], qf[kk], b2, b3);
			}
		}
		float mx0 = -FT_INF, mx1 = -FT_INF;
#pragma unroll
		for (int nb = 0; nb < NB; nb++) {
			const int kp = j0 + nb * 8 + 2 * tg;
			s[nb][0] = kp <= qp0 && kp >= lo0 ? s[nb][0] * scale_log2 : -FT_INF;
			s[nb][1] = kp + 1 <= qp0 && kp + 1 >= lo0 ? s[nb][1] * scale_log2 : -FT_INF;
			s[nb][2] = kp <= qp1 && kp >= lo1 ? s[nb][2] * scale_log2 : -FT_INF;
			s[nb][3] = kp + 1 <= qp1 && kp + 1 >= lo1 ? s[nb][3] * scale_log2 : -FT_INF;
			mx0 = fmaxf(mx0, fmaxf(s[nb][0], s[nb][1]));
			mx1 = fmaxf(mx1, fmaxf(s[nb][2], s[nb][3]));
		}
		mx0 = fmaxf(mx0, __shfl_xor_sync(FT_FULL, mx0, 1));
		mx0 = fmaxf(mx0, __shfl_xor_sync(FT_FULL, mx0, 2));
		mx1 = fmaxf(mx1, __shfl_xor_sync(FT_FULL, mx1, 1));
		mx1 = fmaxf(mx1, __shfl_xor_sync(FT_FULL, mx1, 2));
		const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
		// As in flash_body: a row whose visible keys all lie in later tiles
		// stays at zero instead of NaN until its window starts.
		const float ms0 = mn0 == -FT_INF ? 0.f : mn0, ms1 = mn1 == -FT_INF ? 0.f : mn1;
		const float a0 = exp2f(m0 - ms0), a1 = exp2f(m1 - ms1);
		m0 = mn0;
		m1 = mn1;
		float rs0 = 0.f, rs1 = 0.f;
#pragma unroll
		for (int nb = 0; nb < NB; nb++) {
			s[nb][0] = exp2f(s[nb][0] - ms0);
			s[nb][1] = exp2f(s[nb][1] - ms0);
			s[nb][2] = exp2f(s[nb][2] - ms1);
			s[nb][3] = exp2f(s[nb][3] - ms1);
			rs0 += s[nb][0] + s[nb][1];
			rs1 += s[nb][2] + s[nb][3];
		}
		l0 = l0 * a0 + rs0;  // this thread's share of the row sums; reduced at the end
		l1 = l1 * a1 + rs1;
#pragma unroll
		for (int nd = 0; nd < ND; nd++) {
			o[nd][0] *= a0;
			o[nd][1] *= a0;
			o[nd][2] *= a1;
			o[nd][3] *= a1;
		}
		unsigned pf[NB / 2][4];
#pragma unroll
		for (int kk = 0; kk < NB / 2; kk++) {
			pf[kk][0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
			pf[kk][1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
			pf[kk][2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
			pf[kk][3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
		}

		__syncthreads();  // every warp is done with K tile j
		if (j + 1 < ntiles) flash_load_paged<HD>(Ks, kc, rs, kvh, j0 + BN, kvEnd, tab, bs);
		cp_async_commit();
		cp_async_wait1();
		__syncthreads();  // V tile j is in shared memory

#pragma unroll
		for (int kk = 0; kk < NB / 2; kk++) {
#pragma unroll
			for (int nd = 0; nd < ND; nd += 2) {
				unsigned b0, b1, b2, b3;
				const int row = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
				const int col = nd * 8 + ((lane >> 4) << 3);
				ldmatrix_x4_trans(b0, b1, b2, b3, Vs + row * LD + col);
				mma_bf16(o[nd], pf[kk], b0, b1);
				mma_bf16(o[nd + 1], pf[kk], b2, b3);
			}
		}
		__syncthreads();  // every warp is done with V tile j
	}
	cp_async_wait0();
	l0 += __shfl_xor_sync(FT_FULL, l0, 1);
	l0 += __shfl_xor_sync(FT_FULL, l0, 2);
	l1 += __shfl_xor_sync(FT_FULL, l1, 1);
	l1 += __shfl_xor_sync(FT_FULL, l1, 2);
	const float i0 = l0 > 0.f ? 1.f / l0 : 0.f, i1 = l1 > 0.f ? 1.f / l1 : 0.f;
	const int r0 = t0 + g, r1 = r0 + 8;
#pragma unroll
	for (int nd = 0; nd < ND; nd++) {
		const int c = nd * 8 + 2 * tg;
		if (r0 < T) *(unsigned*)(out + (usize)r0 * qs + (usize)h * HD + c) = pack_bf16(o[nd][0] * i0, o[nd][1] * i0);
		if (r1 < T) *(unsigned*)(out + (usize)r1 * qs + (usize)h * HD + c) = pack_bf16(o[nd][2] * i1, o[nd][3] * i1);
	}
}

// attn_varlen_flash_d32_bf16 is varlen_flash_body for head width 32 (likewise
// _d64_ and _d128_ below): grid (query tiles, H), 128 threads.
extern "C" __global__ void __launch_bounds__(128) attn_varlen_flash_d32_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table, int maxBlocks, int bs,
		float scale_log2, int window) {
	varlen_flash_body<32>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}

// attn_varlen_flash_d64_bf16 is varlen_flash_body for head width 64.
extern "C" __global__ void __launch_bounds__(128) attn_varlen_flash_d64_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table, int maxBlocks, int bs,
		float scale_log2, int window) {
	varlen_flash_body<64>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}

// attn_varlen_flash_d128_bf16 is varlen_flash_body for head width 128.
extern "C" __global__ void __launch_bounds__(128) attn_varlen_flash_d128_bf16(bf16_t* out, const bf16_t* q, const bf16_t* kc,
		const bf16_t* vc, int H, int K, const int* tiles, const int* qStarts, const int* lens, const int* table, int maxBlocks, int bs,
		float scale_log2, int window) {
	varlen_flash_body<128>(out, q, kc, vc, H, K, tiles, qStarts, lens, table, maxBlocks, bs, scale_log2, window);
}
