// The RMSNorm after a residual-accumulating one-token GEMV, done in the
// GEMV's tail ("last block done"): o_proj and down_proj add their product
// into the fp32 residual stream y, and the next projection reads
// x = bf16(RMSNorm(y)·nw). Instead of a separate rmsnorm_f32in_bf16 launch
// (one block of up to 1024 threads, ~3.6 us on the H200 of which most is
// launch and drain), the block of the GEMV that finishes last normalises the
// whole of y (4·N bytes, just written, so in L2) and writes x.
//
// Memory model. Every block, after its last row of y is stored (by lane 0
// of the warp that owns the row), runs __threadfence() in every thread
// (fence.sc at GPU scope: this thread's stores to y are ordered before
// anything it does later, as seen from any thread of the GPU), then
// __syncthreads() (so every thread's fence precedes what thread 0 does
// next), then thread 0 increments the launch's counter with atomicAdd (at
// GPU scope, in L2). This is the release half: when another block observes
// that increment, every y store of this block is visible to it. The block
// whose increment returns gridDim.x − 1 is the last: all other blocks have
// released. Its thread 0 publishes that through shared memory and
// __syncthreads(), every thread runs __threadfence() again (the acquire
// half: no load below may be satisfied before the counter was seen), and
// the loads of y go through __ldcg (ld.global.cg: cached in L2 only). L1 is
// not coherent between SMs, and this SM's L1 may hold 128-byte lines of y
// loaded by the accumulating read y[row] + Σ of its own rows, lines that
// also hold other blocks' rows as they were before those blocks wrote
// them; .cg cannot hit such a stale line. The last block then resets the
// counter to 0 (every block has incremented it, none reads it again), so
// the next launch, and every replay of a captured graph, starts from 0.
//
// Launch order. The counter is one word the backend owns; two launches of
// this kernel never overlap: each calls ft_pdl_wait (in gemv_persist_body)
// before it touches the counter, y or x, and that returns only once the
// kernel before it in the stream has completed, which in turn waited for
// its own predecessor. For the same reason the kernel that reads x next
// (launched with programmatic dependent launch, so its blocks may already
// be resident) sees x: its ft_pdl_wait returns after this whole grid,
// tail included, has completed and its writes are visible.
//
// Values. The tail's sums are those of rmsnorm_f32in_bf16 launched with vt
// threads (the backend passes its block size for width N, as for the
// folded-norm GEMVs' norm_x_smem): virtual thread t sums float4s t, t + vt,
// … with rms_sq4, each virtual warp's 32 sums go through warp_sum, the
// vt/32 warp sums through warp_sum again (block_sum), and rms_scale and
// rms_out round as that kernel does. So x holds exactly the bits the
// separate norm would write, and y those of gemv_persist_f32acc.

// norm_tail_row writes out[c] = bf16(res[c]·scale·nw[c]) for one row of K
// fp32 values (K % 4 == 0, res 16-byte aligned, nw and out 4-byte
// aligned), scale = 1/sqrt(mean(res²) + eps) summed as rmsnorm_f32in_bf16
// at vt threads (a multiple of 32 up to 1024), reading res through L2 only.
// Every thread of the block calls it.
__device__ __forceinline__ void norm_tail_row(bf16_t* out, const float* res, const bf16_t* nw, int K, float eps, int vt) {
	__shared__ float red[32];
	const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nwr = blockDim.x >> 5;
	const int nvw = vt >> 5, n4 = K >> 2;
	const float4* xr = reinterpret_cast<const float4*>(res);
	for (int vw = wid; vw < nvw; vw += nwr) {
		float s = 0.f;
#pragma unroll 4
		for (int c = vw * 32 + lane; c < n4; c += vt) s = rms_sq4(s, __ldcg(xr + c));
		s = warp_sum(s);
		if (lane == 0) red[vw] = s;
	}
	__syncthreads();
	const float scale = rms_scale(warp_sum(lane < nvw ? red[lane] : 0.f), K, eps);
	const unsigned* wv = reinterpret_cast<const unsigned*>(nw);
	unsigned* o = reinterpret_cast<unsigned*>(out);
#pragma unroll 4
	for (int c = threadIdx.x; c < n4; c += blockDim.x) {
		const float4 v = __ldcg(xr + c);
		const unsigned w0 = wv[2 * c], w1 = wv[2 * c + 1];
		o[2 * c] = pack_bf16(rms_out(v.x, scale, __uint_as_float(w0 << 16)), rms_out(v.y, scale, __uint_as_float(w0 & 0xffff0000u)));
		o[2 * c + 1] = pack_bf16(rms_out(v.z, scale, __uint_as_float(w1 << 16)), rms_out(v.w, scale, __uint_as_float(w1 & 0xffff0000u)));
	}
}

// gemv_persist_f32acc_norm is gemv_persist_f32acc (y[n] += Σ_k x[k]·w[n,k],
// y fp32, persistent warps) followed, in the block that finishes last, by
// out = bf16(RMSNorm(y)·nw) over y's N values with eps, the sums of
// rmsnorm_f32in_bf16 at vt threads (see the top of this file). done is a
// counter that is 0 at launch and that the kernel leaves 0; out must not
// overlap y. N % 4 == 0, y 16-byte aligned.
extern "C" __global__ void __launch_bounds__(256) gemv_persist_f32acc_norm(float* y, const bf16_t* x, const bf16_t* w, int N, int K,
		bf16_t* out, const bf16_t* nw, float eps, int vt, unsigned* done) {
	__shared__ bool last;
	gemv_persist_body<false, 16, true>(y, x, w, N, K);  // calls ft_pdl_wait first
	__threadfence();                                    // release this thread's stores of y
	__syncthreads();                                    // ... every thread's, before thread 0's increment
	if (threadIdx.x == 0) last = atomicAdd(done, 1u) == gridDim.x - 1;
	__syncthreads();
	if (!last) return;
	__threadfence();  // acquire: the other blocks' released stores of y are visible from here on
	if (threadIdx.x == 0) atomicExch(done, 0u);
	norm_tail_row(out, y, nw, N, eps, vt);
}
