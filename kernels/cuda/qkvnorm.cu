// A Qwen3-style decode step's q/k/v GEMV with the per-head q/k RMSNorm,
// RoPE and KV-cache store done by the warp that finishes each head
// (FT_FUSE_QKNORM=1, an experiment; kernels/cudabackend/qkvnorm.go): one
// launch instead of the pipelined q/k/v GEMV and qknorm_rope_store_bf16,
// with their bits.

// qkvn_head finishes head `head` of the q/k/v stack of one token once all
// its d rows are written: a q or k head is read back, normalised with its
// weight chunk in sw (rmsnorm_row_v8's sums at one chunk a lane, as
// qknorm_rope_store_bf16 at d/8 ≤ 32 threads: the same bits), rotated by
// the block's angles ss, sc (rope_apply, partners d/2 apart fetched by
// shuffle) and written back, a k head also into cache row p of kc; a v head
// is copied into row p of vc. p outside [0, capacity): nothing is stored.
// The whole warp calls it; lane c takes chunk c (d % 16 == 0, d/8 ≤ 32).
__device__ __forceinline__ void qkvn_head(int head, bf16_t* y0, bf16_t* y1, const bf16_t* y2, bf16_t* kc, bf16_t* vc,
		const uint4* sw, const float* ss, const float* sc, int H, int KV, int d, float eps, int p, bool store) {
	const int c = threadIdx.x & 31, n8 = d >> 3, h8 = n8 >> 1;
	const bool on = c < n8;
	const usize crow = (usize)p * KV * d;
	if (head >= H + KV) {  // a value head: into the cache as it is
		const int vh = head - H - KV;
		if (store && on)
			reinterpret_cast<uint4*>(vc + crow + (usize)vh * d)[c] = __ldcg(reinterpret_cast<const uint4*>(y2 + (usize)vh * d) + c);
		return;
	}
	const bool isq = head < H;
	bf16_t* x = isq ? y0 + (usize)head * d : y1 + (usize)(head - H) * d;
	uint4 xc = make_uint4(0u, 0u, 0u, 0u);
	if (on) xc = __ldcg(reinterpret_cast<const uint4*>(x) + c);
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
	unpack8(on ? sw[(isq ? 0 : 32) + c] : make_uint4(0u, 0u, 0u, 0u), g);
	uint4 r;
	r.x = pack_bf16(f[0] * scale * g[0], f[1] * scale * g[1]);
	r.y = pack_bf16(f[2] * scale * g[2], f[3] * scale * g[3]);
	r.z = pack_bf16(f[4] * scale * g[4], f[5] * scale * g[5]);
	r.w = pack_bf16(f[6] * scale * g[6], f[7] * scale * g[7]);
	const bool lo = c < h8;
	const int pc = lo ? c + h8 : c - h8;  // the partner chunk's lane
	uint4 o;
	o.x = __shfl_sync(FT_FULL, r.x, pc);
	o.y = __shfl_sync(FT_FULL, r.y, pc);
	o.z = __shfl_sync(FT_FULL, r.z, pc);
	o.w = __shfl_sync(FT_FULL, r.w, pc);
	if (!on) return;
	float a[8], b[8];
	unpack8(lo ? r : o, a);  // the first halves' values
	unpack8(lo ? o : r, b);  // their partners, d/2 further
	const int i0 = 8 * (lo ? c : c - h8);
	unsigned yw[4];
#pragma unroll
	for (int e = 0; e < 8; e += 2) {
		bf16_t r0, r1, u0, u1;
		rope_apply(a[e], b[e], ss[i0 + e], sc[i0 + e], r0, r1);
		rope_apply(a[e + 1], b[e + 1], ss[i0 + e + 1], sc[i0 + e + 1], u0, u1);
		yw[e >> 1] = (unsigned)(lo ? r0 : r1) | ((unsigned)(lo ? u0 : u1) << 16);
	}
	const uint4 yc = make_uint4(yw[0], yw[1], yw[2], yw[3]);
	reinterpret_cast<uint4*>(x)[c] = yc;
	if (!isq && store) reinterpret_cast<uint4*>(kc + crow + (usize)(head - H) * d)[c] = yc;
}

// gemv3_qknorm_rope_early_bf16: for one token x[K] at position p = *posp
// (a captured graph) or pos0, y0 = x·w0ᵀ (q, N0 = H·d rows), y1 = x·w1ᵀ (k,
// N1 = KV·d), y2 = x·w2ᵀ (v, N2 = KV·d) as gemv3_pipe_early_bf16 computes
// them (the same loop, sums and bf16 roundings); then each q and k head is
// normalised with wq or wk (eps), rotated by θ = float(p)·inv[i] and
// written back in place, and k and v land in cache row p of kc and vc
// [C,KV,d] when 0 ≤ p < capacity: the bits of qknorm_rope_store_bf16 on
// the same y. The warp whose row completes a head (cnt[head], one int a
// head, counts the head's rows written; its last writer sees d − 1) does
// that head's work (qkvn_head) and sets the count back to zero, so cnt is
// zero between launches (the caller zeroes it once). Before the
// dependent-launch wait each block computes the d/2 angles into shared
// memory and loads the norm weights (constants, and a position that no
// kernel still running writes: common.cuh), and each warp issues its first
// weight batch (bfp_loop's EARLY). d % 16 == 0, d/8 ≤ 32, K % 8 == 0,
// 16-byte aligned rows.
extern "C" __global__ void __launch_bounds__(256) gemv3_qknorm_rope_early_bf16(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* x,
		const bf16_t* w0, const bf16_t* w1, const bf16_t* w2, int N0, int N1, int N2, int K, bf16_t* kc, bf16_t* vc,
		const bf16_t* wq, const bf16_t* wk, int d, float eps, int capacity, const int* posp, int pos0, const float* inv, int* cnt) {
	__shared__ float ss[128], sc[128];
	__shared__ uint4 sw[64];  // q's weight chunks, then k's
	const int tid = threadIdx.x, half = d >> 1, n8 = d >> 3;
	const int p = ft_pos(posp, pos0);
	for (int i = tid; i < half; i += blockDim.x) rope_angle(p, inv[i], ss[i], sc[i]);
	if (tid < n8) sw[tid] = reinterpret_cast<const uint4*>(wq)[tid];
	else if (tid >= 32 && tid < 32 + n8) sw[tid] = reinterpret_cast<const uint4*>(wk)[tid - 32];
	__syncthreads();
	const int lane = tid & 31;
	const int nw = (gridDim.x * blockDim.x) >> 5;
	const int r0 = (blockIdx.x * blockDim.x + tid) >> 5;
	const int H = N0 / d, KV = N1 / d;
	const bool store = p >= 0 && p < capacity;
	auto rows = [&](int r, const uint4* (&wr)[1]) {
		bf16_t* yp;
		gemv3_row(r, y0, y1, y2, w0, w1, w2, N0, N1, K, wr[0], yp);
	};
	auto finish = [&](int r, float* acc) {
		const float s = warp_sum(acc[0]);
		const int head = r / d;
		int seen = 0;
		if (lane == 0) {
			bf16_t* yp = r < N0 ? y0 + r : r < N0 + N1 ? y1 + (r - N0) : y2 + (r - N0 - N1);
			*yp = f2bf(s);
			__threadfence();  // the row is visible before it is counted
			seen = atomicAdd(cnt + head, 1);
		}
		if (__shfl_sync(FT_FULL, seen, 0) != d - 1) return;
		if (lane == 0) cnt[head] = 0;
		__threadfence();  // the other warps' rows of the head are visible
		qkvn_head(head, y0, y1, y2, kc, vc, sw, ss, sc, H, KV, d, eps, p, store);
	};
	bfp_loop<1, 4, decltype(rows), decltype(finish), true>(r0, nw, N0 + N1 + N2, K, x, rows, finish);
}
