// One token's decode attention fused with the o_proj that adds its result
// into the F32 residual (issue 21, FT_ATTN_OPROJ; kernels.AttnOProjer,
// kernels/cudabackend/attnoproj.go). The decode attention alone is latency
// bound (small dependent loads, HBM idle) and the o_proj GEMV waits for it;
// here each block starts its share of the o_proj weights streaming into
// shared memory while it computes the attention, then multiplies.
//
// Grid (K, C): block (g, c) takes KV head g (its G = H/K query heads) and
// output rows [c·rpc, min(N, (c+1)·rpc)) of W_o [N, H·128]. Every block of a
// KV head computes that head's attention over all n positions itself (the
// C blocks read the same keys and values, mostly from L2), giving
// o_g[G][128], rounded to bf16 as the separate attention's output is. Then
// part[g][row] = W_o[row, g·G·128 .. (g+1)·G·128) · o_g in F32, and the last
// of the K blocks of chunk c to finish (a counter per chunk, reset to 0 by
// that block so graph replays find it clear) sums the K partials in order g
// = 0 .. K−1 and adds the sum into y: no float atomics, the same bits every
// run.
//
// Phases of a block (256 threads; thread t: row offset t/16 of 16 rows at a
// time, 16-byte chunk t%16 of a 128-wide row):
//   1. after ft_pdl_wait, the first keys (registers) and q are loaded, then
//      cp.async copies the first preRows rows of the block's weight tile
//      (preRows · G·256 bytes) into shared memory; they stream while:
//   2. scores s[h][p] = q_h·k_p·scale_log2 into shared memory, AO_U rows a
//      thread in flight at a time;
//   3. the softmax per head (warp h): maxima, base-2 exponentials, 1/sum;
//   4. o[h] = Σ_p P[h][p]·v_p: each thread a chunk of 8 values over its
//      rows, the halves of a warp then the 8 warps combined in order;
//   5. the rows past preRows straight from global memory (4 rows a warp in
//      flight), then the shared-memory rows;
//   6. the partials, the counter, the last block's ordered sum into y.
//
// Dynamic shared memory (kernels/cudabackend/attnoprojmode.go's
// attnOProjSmem): the weight rows, then q
// (G·128 floats), the scores (G·maxL), the warps' partial outputs
// (8·G·128), o (G·128).

#define AO_NT 256
#define AO_NW 8
#define AO_U 8

__device__ __forceinline__ float ao_ld_cg(const float* p) {
	float v;
	asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
	return v;
}

// ao_dot8 is Σ w[j]·x[j] over the 8 bf16 values of a.
__device__ __forceinline__ float ao_dot8(uint4 a, const float* x) {
	float f[8];
	unpack8(a, f);
	float s = 0.f;
#pragma unroll
	for (int j = 0; j < 8; j++) s = fmaf(f[j], x[j], s);
	return s;
}

template <int G>
__device__ __forceinline__ void attn_oproj_body(float* y, float* part, int* cnt, const bf16_t* q, const bf16_t* kc, const bf16_t* vc,
		const bf16_t* w, int H, int K, int N, int rpc, int preRows, int maxL, const int* posp, int pos0, float scale_log2) {
	constexpr int HD = 128;
	constexpr int SEGC = G * HD / 8;           // 16-byte chunks of a row's segment
	constexpr int KC = (SEGC + 31) / 32;       // of them a lane takes
	extern __shared__ uint4 ao_smem[];
	__shared__ float s_inv[G];
	__shared__ int isLast;
	const int g = blockIdx.x, c = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int r0 = c * rpc, r1 = min(N, r0 + rpc), nr = max(0, r1 - r0), npre = min(preRows, nr);
	const usize D = (usize)H * HD;
	const bf16_t* wb = w + (usize)r0 * D + (usize)g * G * HD;
	uint4* wpre = ao_smem;
	float* qs = (float*)(ao_smem + (usize)preRows * SEGC);
	float* sc = qs + G * HD;
	float* ov = sc + G * maxL;
	float* ob = ov + AO_NW * G * HD;

	ft_pdl_wait();
	const int n = min(ft_pos(posp, pos0) + 1, maxL);  // the launch checked n ≤ maxL
	const int rr = tid >> 4, c8 = tid & 15;
	const usize rs = (usize)K * HD;
	const bf16_t* kb = kc + (usize)g * HD + 8 * c8;
	const bf16_t* vb = vc + (usize)g * HD + 8 * c8;

	// 1. The first keys, q, then the weight rows into shared memory.
	uint4 kr[AO_U];
#pragma unroll
	for (int u = 0; u < AO_U; u++) {
		const int p = rr + 16 * u;
		kr[u] = p < n ? *(const uint4*)(kb + (usize)p * rs) : make_uint4(0u, 0u, 0u, 0u);
	}
	for (int i = tid; i < G * HD; i += AO_NT) qs[i] = bf2f(q[(usize)g * G * HD + i]);
	for (int i = tid; i < npre * SEGC; i += AO_NT) {
		const int r = i / SEGC, cc = i - r * SEGC;
		cp_async16(wpre + i, wb + (usize)r * D + 8 * cc);
	}
	cp_async_commit();
	__syncthreads();

	// 2. Scores.
	{
		float qr[G][8];
#pragma unroll
		for (int h = 0; h < G; h++)
#pragma unroll
			for (int j = 0; j < 8; j++) qr[h][j] = qs[h * HD + 8 * c8 + j];
		for (int p0 = 0; p0 < n; p0 += 16 * AO_U) {
			if (p0 > 0) {
#pragma unroll
				for (int u = 0; u < AO_U; u++) {
					const int p = p0 + rr + 16 * u;
					if (p < n) kr[u] = *(const uint4*)(kb + (usize)p * rs);
				}
			}
#pragma unroll
			for (int u = 0; u < AO_U; u++) {
				const int p = p0 + rr + 16 * u;
				if (p0 + 16 * u >= n) break;  // uniform over the block: every lane shuffles
				float kf[8];
				unpack8(kr[u], kf);
				float s[G];
#pragma unroll
				for (int h = 0; h < G; h++) {
					float a = 0.f;
#pragma unroll
					for (int j = 0; j < 8; j++) a = fmaf(qr[h][j], kf[j], a);
					s[h] = a;
				}
#pragma unroll
				for (int o = 8; o > 0; o >>= 1)
#pragma unroll
					for (int h = 0; h < G; h++) s[h] += __shfl_xor_sync(FT_FULL, s[h], o);
				if (c8 == 0 && p < n)
#pragma unroll
					for (int h = 0; h < G; h++) sc[h * maxL + p] = s[h] * scale_log2;
			}
		}
	}
	__syncthreads();

	// 3. Softmax: warp h of head h.
	if (warp < G) {
		float* sh = sc + warp * maxL;
		float m = -FT_INF;
		for (int p = lane; p < n; p += 32) m = fmaxf(m, sh[p]);
		m = warp_max(m);
		float l = 0.f;
		for (int p = lane; p < n; p += 32) {
			const float e = exp2f(sh[p] - m);
			sh[p] = e;
			l += e;
		}
		l = warp_sum(l);
		if (lane == 0) s_inv[warp] = 1.f / l;
	}
	__syncthreads();

	// 4. o = P·V.
	{
		float acc[G][8];
#pragma unroll
		for (int h = 0; h < G; h++)
#pragma unroll
			for (int j = 0; j < 8; j++) acc[h][j] = 0.f;
		for (int p0 = 0; p0 < n; p0 += 16 * AO_U) {
			uint4 vr[AO_U];
#pragma unroll
			for (int u = 0; u < AO_U; u++) {
				const int p = p0 + rr + 16 * u;
				vr[u] = p < n ? *(const uint4*)(vb + (usize)p * rs) : make_uint4(0u, 0u, 0u, 0u);
			}
#pragma unroll
			for (int u = 0; u < AO_U; u++) {
				const int p = p0 + rr + 16 * u;
				if (p < n) {
					float vf[8];
					unpack8(vr[u], vf);
#pragma unroll
					for (int h = 0; h < G; h++) {
						const float pr = sc[h * maxL + p];
#pragma unroll
						for (int j = 0; j < 8; j++) acc[h][j] = fmaf(pr, vf[j], acc[h][j]);
					}
				}
			}
		}
#pragma unroll
		for (int h = 0; h < G; h++)
#pragma unroll
			for (int j = 0; j < 8; j++) acc[h][j] += __shfl_xor_sync(FT_FULL, acc[h][j], 16);
		if (lane < 16)
#pragma unroll
			for (int h = 0; h < G; h++)
#pragma unroll
				for (int j = 0; j < 8; j++) ov[(warp * G + h) * HD + 8 * c8 + j] = acc[h][j];
	}
	__syncthreads();
	for (int i = tid; i < G * HD; i += AO_NT) {
		const int h = i / HD;
		float s = 0.f;
#pragma unroll
		for (int wq = 0; wq < AO_NW; wq++) s += ov[(wq * G + h) * HD + (i - h * HD)];
		ob[i] = bf2f(f2bf(s * s_inv[h]));
	}
	__syncthreads();

	// 5. The products: this lane's chunks of o, then the rows.
	float xo[KC][8];
#pragma unroll
	for (int k = 0; k < KC; k++) {
		const int cc = lane + 32 * k;
#pragma unroll
		for (int j = 0; j < 8; j++) xo[k][j] = cc < SEGC ? ob[8 * cc + j] : 0.f;
	}
	float* pg = part + (usize)g * N + r0;
	for (int rb = npre + 4 * warp; rb < nr; rb += 4 * AO_NW) {
		uint4 wr[4][KC];
#pragma unroll
		for (int x = 0; x < 4; x++)
#pragma unroll
			for (int k = 0; k < KC; k++) {
				const int cc = lane + 32 * k;
				wr[x][k] = rb + x < nr && cc < SEGC ? *(const uint4*)(wb + (usize)(rb + x) * D + 8 * cc) : make_uint4(0u, 0u, 0u, 0u);
			}
#pragma unroll
		for (int x = 0; x < 4; x++) {
			float s = 0.f;
#pragma unroll
			for (int k = 0; k < KC; k++) s += ao_dot8(wr[x][k], xo[k]);
			s = warp_sum(s);
			if (lane == 0 && rb + x < nr) pg[rb + x] = s;
		}
	}
	cp_async_wait0();
	__syncthreads();
	for (int r = warp; r < npre; r += AO_NW) {
		float s = 0.f;
#pragma unroll
		for (int k = 0; k < KC; k++) {
			const int cc = lane + 32 * k;
			if (cc < SEGC) s += ao_dot8(wpre[r * SEGC + cc], xo[k]);
		}
		s = warp_sum(s);
		if (lane == 0) pg[r] = s;
	}

	// 6. The last block of chunk c adds the K partials into y.
	__threadfence();
	__syncthreads();
	if (tid == 0) isLast = atomicAdd(cnt + c, 1) == K - 1;
	__syncthreads();
	if (!isLast) return;
	__threadfence();
	for (int i = tid; i < nr; i += AO_NT) {
		float s = 0.f;
		for (int gg = 0; gg < K; gg++) s += ao_ld_cg(part + (usize)gg * N + r0 + i);
		y[r0 + i] += s;
	}
	if (tid == 0) cnt[c] = 0;
}

// attn_oproj_g1_bf16 (one query head a KV head; the g2, g4, g8 twins
// below take 2, 4, 8): grid (K, C), 256 threads, the dynamic shared memory
// of attnOProjSmem. y [N] F32 (+=), part [K][N] F32 scratch, cnt
// [C] ints (0 on entry, left 0), q [H][128], caches [capacity][K][128], w
// [N][H·128], all bf16; the token at position ft_pos(posp, pos0) sees
// positions 0 .. that (at most maxL).
extern "C" __global__ void __launch_bounds__(AO_NT, 1) attn_oproj_g1_bf16(float* y, float* part, int* cnt, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, const bf16_t* w, int H, int K, int N, int rpc, int preRows, int maxL, const int* posp, int pos0,
		float scale_log2) {
	attn_oproj_body<1>(y, part, cnt, q, kc, vc, w, H, K, N, rpc, preRows, maxL, posp, pos0, scale_log2);
}

// attn_oproj_g2_bf16: attn_oproj_g1_bf16 at 2 query heads a KV head.
extern "C" __global__ void __launch_bounds__(AO_NT, 1) attn_oproj_g2_bf16(float* y, float* part, int* cnt, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, const bf16_t* w, int H, int K, int N, int rpc, int preRows, int maxL, const int* posp, int pos0,
		float scale_log2) {
	attn_oproj_body<2>(y, part, cnt, q, kc, vc, w, H, K, N, rpc, preRows, maxL, posp, pos0, scale_log2);
}

// attn_oproj_g4_bf16: attn_oproj_g1_bf16 at 4 query heads a KV head.
extern "C" __global__ void __launch_bounds__(AO_NT, 1) attn_oproj_g4_bf16(float* y, float* part, int* cnt, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, const bf16_t* w, int H, int K, int N, int rpc, int preRows, int maxL, const int* posp, int pos0,
		float scale_log2) {
	attn_oproj_body<4>(y, part, cnt, q, kc, vc, w, H, K, N, rpc, preRows, maxL, posp, pos0, scale_log2);
}

// attn_oproj_g8_bf16: attn_oproj_g1_bf16 at 8 query heads a KV head.
extern "C" __global__ void __launch_bounds__(AO_NT, 1) attn_oproj_g8_bf16(float* y, float* part, int* cnt, const bf16_t* q,
		const bf16_t* kc, const bf16_t* vc, const bf16_t* w, int H, int K, int N, int rpc, int preRows, int maxL, const int* posp, int pos0,
		float scale_log2) {
	attn_oproj_body<8>(y, part, cnt, q, kc, vc, w, H, K, N, rpc, preRows, maxL, posp, pos0, scale_log2);
}
