// One-token matrix-vector products whose weights stream through a ring of
// shared-memory stages filled by Hopper's bulk-copy engine
// (cp.async.bulk + mbarrier complete_tx), FT_GEMV=bulk
// (kernels/cudabackend/bulkgemv.go). Weights never depend on an earlier
// kernel, so each block issues the copies of its first S stages at entry,
// BEFORE ft_pdl_wait: under programmatic dependent launch the first bytes
// reach the SM while the kernel before it still runs. Only then does it wait,
// read the activation x into shared memory and consume the ring while one
// producer thread refills it.
//
// Layout: one block per SM, 8 consumer warps and 1 producer warp (288
// threads). Block b takes the contiguous rows [b·N/G, (b+1)·N/G) of the
// row space (q, k and v stacked; one matrix; or gate and up side by side),
// in stages of R rows (R·2K bytes, twice that for gate·up), S stages in the
// ring. Dynamic shared memory: x (K·2 bytes, rounded up to 128), then the
// S stages. Local row g of the block is summed by warp g % 8, lane l adding
// dot8 of its 16-byte chunks l, l+32, … in order and then warp_sum: the
// order and roundings of gemv.cu's persistent kernels, so the outputs are
// the same bits.
//
// Every mbarrier wait is bounded (ft_bar_wait): a wait longer than about
// 2^33 clocks (a missing complete_tx) traps, failing the launch instead of
// hanging the device.

#define FT_BULK_WARPS 8
#define FT_BULK_MAXS 8

__device__ __forceinline__ void ft_bar_init(unsigned long long* bar, unsigned count) {
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void ft_bar_expect(unsigned long long* bar, unsigned bytes) {
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void ft_bar_arrive(unsigned long long* bar) {
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

// ft_bar_wait waits for the phase of parity par of bar to complete; traps
// after about 2^33 clocks (seconds) so that a lost transaction cannot hang.
__device__ __forceinline__ void ft_bar_wait(unsigned long long* bar, unsigned par) {
	const unsigned a = smem_u32(bar);
	const long long t0 = clock64();
	for (;;) {
		unsigned ok;
		asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
			: "=r"(ok) : "r"(a), "r"(par) : "memory");
		if (ok) return;
		if (clock64() - t0 > (1ll << 33)) __trap();
	}
}

// ft_bulk_g2s copies bytes (a multiple of 16, both addresses 16-byte
// aligned) from global src to shared dst, completing them on bar.
__device__ __forceinline__ void ft_bulk_g2s(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
		::"r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar)) : "memory");
}

#define FT_BULK_BF16 0   // bf16 y per segment (q/k/v, or one matrix)
#define FT_BULK_F32 1    // fp32 y
#define FT_BULK_ACC 2    // fp32 y += product (the residual stream)
#define FT_BULK_GATEUP 3 // bf16 act = silu(gate)·up

// ft_bulk_issue fills stage j of the block's rows [r0, r1) into slot buf:
// rows [a, b) of the row space, split where they cross segment ends (N0,
// N0+N1); for gate·up the gate rows, then the up rows at offset R·rb.
template <int MODE>
__device__ __forceinline__ void ft_bulk_issue(char* buf, unsigned long long* bar, int j, int r0, int r1, int R, usize rb,
		const bf16_t* w0, const bf16_t* w1, const bf16_t* w2, int N0, int N1) {
	const int a = r0 + j * R, b = min(r1, a + R);
	const unsigned n = (unsigned)(b - a);
	if (MODE == FT_BULK_GATEUP) {
		ft_bar_expect(bar, (unsigned)(2 * n * rb));
		ft_bulk_g2s(buf, (const char*)w0 + (usize)a * rb, (unsigned)(n * rb), bar);
		ft_bulk_g2s(buf + (usize)R * rb, (const char*)w1 + (usize)a * rb, (unsigned)(n * rb), bar);
		return;
	}
	ft_bar_expect(bar, (unsigned)(n * rb));
	int r = a;
	while (r < b) {
		const bf16_t* w;
		int base, end;
		if (r < N0) w = w0, base = 0, end = N0;
		else if (r < N0 + N1) w = w1, base = N0, end = N0 + N1;
		else w = w2, base = N0 + N1, end = b;
		const int e = min(b, end);
		ft_bulk_g2s(buf + (usize)(r - a) * rb, (const char*)w + (usize)(r - base) * rb, (unsigned)((usize)(e - r) * rb), bar);
		r = e;
	}
}

// gemv_bulk_body: see the top of the file. Rows N = N0+N1+N2 (gate·up: N0,
// with w0 the gate and w1 the up weights); y0, y1, y2 the outputs of the
// three segments (MODE BF16), y0 alone otherwise. K % 8 == 0, every pointer
// 16-byte aligned, 1 <= S <= FT_BULK_MAXS, blockDim 288.
template <int MODE>
__device__ __forceinline__ void gemv_bulk_body(void* y0, void* y1, void* y2, const bf16_t* __restrict__ x,
		const bf16_t* w0, const bf16_t* w1, const bf16_t* w2, int N0, int N1, int N2, int K, int R, int S) {
	extern __shared__ __align__(128) char bulk_sm[];
	__shared__ unsigned long long full[FT_BULK_MAXS], empty[FT_BULK_MAXS];
	const int N = N0 + N1 + N2;
	const int r0 = (int)((long long)blockIdx.x * N / gridDim.x), r1 = (int)((long long)(blockIdx.x + 1) * N / gridDim.x);
	const int nst = (r1 - r0 + R - 1) / R;
	const usize rb = (usize)K * 2;
	const usize xbytes = (rb + 127) & ~(usize)127;
	const usize sb = (usize)R * rb * (MODE == FT_BULK_GATEUP ? 2 : 1);
	char* ring = bulk_sm + xbytes;
	const int wid = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const bool producer = wid == FT_BULK_WARPS && lane == 0;
	if (producer) {
		for (int s = 0; s < S; s++) {
			ft_bar_init(&full[s], 1);
			ft_bar_init(&empty[s], FT_BULK_WARPS);
		}
		asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
		asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
		// The weights do not depend on the kernel before: start streaming now.
		for (int j = 0; j < min(S, nst); j++)
			ft_bulk_issue<MODE>(ring + (usize)j * sb, &full[j], j, r0, r1, R, rb, w0, w1, w2, N0, N1);
	}
	ft_pdl_wait();
	{
		const uint4* xg = reinterpret_cast<const uint4*>(x);
		uint4* xs = reinterpret_cast<uint4*>(bulk_sm);
		for (int i = threadIdx.x; i < (K >> 3); i += blockDim.x) xs[i] = xg[i];
	}
	__syncthreads(); // x and the barriers' init
	if (wid == FT_BULK_WARPS) {
		if (lane == 0) {
			for (int j = S; j < nst; j++) {
				const int s = j % S;
				ft_bar_wait(&empty[s], (unsigned)((j / S - 1) & 1));
				ft_bulk_issue<MODE>(ring + (usize)s * sb, &full[s], j, r0, r1, R, rb, w0, w1, w2, N0, N1);
			}
		}
		return;
	}
	const uint4* xv = reinterpret_cast<const uint4*>(bulk_sm);
	const int nv = K >> 3;
	for (int j = 0; j < nst; j++) {
		const int s = j % S;
		const int a = r0 + j * R, n = min(r1, a + R) - a;
		ft_bar_wait(&full[s], (unsigned)((j / S) & 1));
		const char* st = ring + (usize)s * sb;
		for (int q = (wid - (j * R) % FT_BULK_WARPS + FT_BULK_WARPS) % FT_BULK_WARPS; q < n; q += FT_BULK_WARPS) {
			const uint4* wr = reinterpret_cast<const uint4*>(st + (usize)q * rb);
			const int r = a + q;
			if (MODE == FT_BULK_GATEUP) {
				const uint4* ur = reinterpret_cast<const uint4*>(st + ((usize)R + q) * rb);
				float g = 0.f, u = 0.f;
#pragma unroll 4
				for (int i = lane; i < nv; i += 32) {
					const uint4 xx = xv[i];
					g += dot8(wr[i], xx);
					u += dot8(ur[i], xx);
				}
				g = warp_sum(g);
				u = warp_sum(u);
				if (lane == 0) ((bf16_t*)y0)[r] = f2bf(g / (1.f + expf(-g)) * u);
			} else {
				float acc = 0.f;
#pragma unroll 8
				for (int i = lane; i < nv; i += 32) acc += dot8(wr[i], xv[i]);
				acc = warp_sum(acc);
				if (lane == 0) {
					if (MODE == FT_BULK_BF16) {
						if (r < N0) ((bf16_t*)y0)[r] = f2bf(acc);
						else if (r < N0 + N1) ((bf16_t*)y1)[r - N0] = f2bf(acc);
						else ((bf16_t*)y2)[r - N0 - N1] = f2bf(acc);
					} else if (MODE == FT_BULK_ACC) {
						((float*)y0)[r] = ((float*)y0)[r] + acc;
					} else {
						((float*)y0)[r] = acc;
					}
				}
			}
		}
		__syncwarp();
		if (lane == 0) ft_bar_arrive(&empty[s]);
	}
}

// gemv_bulk_bf16: y_j[n] = Σ_k x[k]·w_j[n,k] for the three segments (q, k,
// v; N1 = N2 = 0 for one matrix), bf16 outputs, weights through the bulk
// ring (gemv3_bf16's and gemv_persist_bf16's results).
extern "C" __global__ void __launch_bounds__(288, 1) gemv_bulk_bf16(bf16_t* y0, bf16_t* y1, bf16_t* y2, const bf16_t* x,
		const bf16_t* w0, const bf16_t* w1, const bf16_t* w2, int N0, int N1, int N2, int K, int R, int S) {
	gemv_bulk_body<FT_BULK_BF16>(y0, y1, y2, x, w0, w1, w2, N0, N1, N2, K, R, S);
}

// gemv_bulk_f32out: y[n] = Σ_k x[k]·w[n,k], fp32 y (the LM head's logits;
// gemv_persist_f32out's results), weights through the bulk ring.
extern "C" __global__ void __launch_bounds__(288, 1) gemv_bulk_f32out(float* y, const bf16_t* x, const bf16_t* w, int N, int K, int R, int S) {
	gemv_bulk_body<FT_BULK_F32>(y, nullptr, nullptr, x, w, w, w, N, 0, 0, K, R, S);
}

// gemv_bulk_f32acc: y[n] += Σ_k x[k]·w[n,k], fp32 y (the residual stream:
// o_proj and down_proj; gemv_persist_f32acc's results), weights through the
// bulk ring.
extern "C" __global__ void __launch_bounds__(288, 1) gemv_bulk_f32acc(float* y, const bf16_t* x, const bf16_t* w, int N, int K, int R, int S) {
	gemv_bulk_body<FT_BULK_ACC>(y, nullptr, nullptr, x, w, w, w, N, 0, 0, K, R, S);
}

// gemv_bulk_gateup_silu: act[n] = silu(Σ_k x[k]·wg[n,k])·Σ_k x[k]·wu[n,k]
// (gemv_gateup_silu_bf16's results), each stage holding R gate rows then
// the R up rows of the same indices.
extern "C" __global__ void __launch_bounds__(288, 1) gemv_bulk_gateup_silu(bf16_t* act, const bf16_t* x, const bf16_t* wg, const bf16_t* wu,
		int N, int K, int R, int S) {
	gemv_bulk_body<FT_BULK_GATEUP>(act, nullptr, nullptr, x, wg, wu, wu, N, 0, 0, K, R, S);
}

// Read-bandwidth probes (TestBulkReadBandwidth): how fast this GPU streams
// a buffer with the two ways of loading weights.

// bw_read_vec reads n 16-byte words with 16-byte loads, 8 in flight per
// thread, grid-stride (the persistent GEMVs' pattern), and writes the xor of
// everything read to sink[0] only where it equals the impossible key (so
// the loads are not optimised away).
extern "C" __global__ void __launch_bounds__(256) bw_read_vec(const uint4* __restrict__ p, usize n, unsigned key, unsigned* sink) {
	const usize stride = (usize)gridDim.x * blockDim.x;
	unsigned acc = 0;
	usize i = (usize)blockIdx.x * blockDim.x + threadIdx.x;
	for (; i + 7 * stride < n; i += 8 * stride) {
		uint4 a[8];
#pragma unroll
		for (int u = 0; u < 8; u++) a[u] = __ldg(p + i + u * stride);
#pragma unroll
		for (int u = 0; u < 8; u++) acc ^= a[u].x ^ a[u].y ^ a[u].z ^ a[u].w;
	}
	for (; i < n; i += stride) {
		const uint4 a = __ldg(p + i);
		acc ^= a.x ^ a.y ^ a.z ^ a.w;
	}
	if (acc == key) sink[0] = acc;
}

// bw_read_bulk streams bytes (a multiple of 16) through a ring of S stages
// of sb bytes per block (dynamic shared memory S·sb), one producer thread
// issuing bulk copies, 8 consumer warps reading one word of each stage;
// block b takes the contiguous b-th 1/G of the buffer. Writes sink[0] as
// bw_read_vec does.
extern "C" __global__ void __launch_bounds__(288, 1) bw_read_bulk(const char* __restrict__ p, usize bytes, int sb, int S, unsigned key, unsigned* sink) {
	extern __shared__ __align__(128) char bulk_sm[];
	__shared__ unsigned long long full[FT_BULK_MAXS], empty[FT_BULK_MAXS];
	const usize n16 = bytes >> 4;
	const usize b0 = ((usize)blockIdx.x * n16 / gridDim.x) << 4, b1 = ((usize)(blockIdx.x + 1) * n16 / gridDim.x) << 4;
	const int nst = (int)((b1 - b0 + sb - 1) / sb);
	const int wid = threadIdx.x >> 5, lane = threadIdx.x & 31;
	if (threadIdx.x == 0) {
		for (int s = 0; s < S; s++) {
			ft_bar_init(&full[s], 1);
			ft_bar_init(&empty[s], FT_BULK_WARPS);
		}
		asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
		asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
	}
	__syncthreads();
	if (wid == FT_BULK_WARPS) {
		if (lane == 0) {
			for (int j = 0; j < nst; j++) {
				const int s = j % S;
				if (j >= S) ft_bar_wait(&empty[s], (unsigned)((j / S - 1) & 1));
				const usize o = b0 + (usize)j * sb;
				const unsigned len = (unsigned)min((usize)sb, b1 - o);
				ft_bar_expect(&full[s], len);
				ft_bulk_g2s(bulk_sm + (usize)s * sb, p + o, len, &full[s]);
			}
		}
		return;
	}
	unsigned acc = 0;
	for (int j = 0; j < nst; j++) {
		const int s = j % S;
		ft_bar_wait(&full[s], (unsigned)((j / S) & 1));
		acc ^= *(const unsigned*)(bulk_sm + (usize)s * sb + (usize)threadIdx.x * 4);
		__syncwarp();
		if (lane == 0) ft_bar_arrive(&empty[s]);
	}
	if (acc == key) sink[0] = acc;
}
