// Elementwise kernels, gathers and small reductions.

// add_bf16: out[i] = a[i] + b[i] (fp32 add, rounded once); out may alias a or b.
extern "C" __global__ void add_bf16(bf16_t* out, const bf16_t* a, const bf16_t* b, long long n) {
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
		out[i] = f2bf(bf2f(a[i]) + bf2f(b[i]));
}

// add_bf16_v8 is add_bf16 on 8 values per thread (n8 = n/8 vectors, 16-byte aligned).
extern "C" __global__ void add_bf16_v8(uint4* out, const uint4* a, const uint4* b, long long n8) {
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += (long long)gridDim.x * blockDim.x) {
		float x[8], y[8];
		unpack8(a[i], x);
		unpack8(b[i], y);
		uint4 r;
		r.x = pack_bf16(x[0] + y[0], x[1] + y[1]);
		r.y = pack_bf16(x[2] + y[2], x[3] + y[3]);
		r.z = pack_bf16(x[4] + y[4], x[5] + y[5]);
		r.w = pack_bf16(x[6] + y[6], x[7] + y[7]);
		out[i] = r;
	}
}

__device__ __forceinline__ float silu_mul1(float g, float u) { return g / (1.f + expf(-g)) * u; }

// silu_mul_bf16: out[i] = g·σ(g)·up[i] with g = gate[i], σ(g) = 1/(1+e^−g); out may alias gate or up.
extern "C" __global__ void silu_mul_bf16(bf16_t* out, const bf16_t* gate, const bf16_t* up, long long n) {
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
		out[i] = f2bf(silu_mul1(bf2f(gate[i]), bf2f(up[i])));
}

// silu_mul_bf16_v8 is silu_mul_bf16 on 8 values per thread (n8 vectors, 16-byte aligned).
extern "C" __global__ void silu_mul_bf16_v8(uint4* out, const uint4* gate, const uint4* up, long long n8) {
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += (long long)gridDim.x * blockDim.x) {
		float g[8], u[8];
		unpack8(gate[i], g);
		unpack8(up[i], u);
		uint4 r;
		r.x = pack_bf16(silu_mul1(g[0], u[0]), silu_mul1(g[1], u[1]));
		r.y = pack_bf16(silu_mul1(g[2], u[2]), silu_mul1(g[3], u[3]));
		r.z = pack_bf16(silu_mul1(g[4], u[4]), silu_mul1(g[5], u[5]));
		r.w = pack_bf16(silu_mul1(g[6], u[6]), silu_mul1(g[7], u[7]));
		out[i] = r;
	}
}

// embedding_bf16: out[t,c] = table[ids[t],c] for t = blockIdx.x, c < dim; an
// id outside [0, vocab) gives a row of NaN (the host checks ids first). A
// row spreads over gridDim.y blocks (a decode step's one row over several,
// so that a thread's loads are few: one block took ~9 µs for 4,096 values,
// s27e's trace).
extern "C" __global__ void embedding_bf16(bf16_t* out, const bf16_t* table, const int* ids, int dim, int vocab) {
	const int t = blockIdx.x;
	const int id = ids[t];
	bf16_t* o = out + (usize)t * dim;
	const int c0 = blockIdx.y * blockDim.x + threadIdx.x, step = gridDim.y * blockDim.x;
	if (id < 0 || id >= vocab) {
		for (int c = c0; c < dim; c += step) o[c] = FT_BF16_NAN;
		return;
	}
	const bf16_t* r = table + (usize)id * dim;
	for (int c = c0; c < dim; c += step) o[c] = r[c];
}

// store_rows_bf16: cache[(p+t)·row + j] = x[t·row + j] for t = blockIdx.x,
// j < row, p the step position (posp or pos0); rows at or past capacity are
// skipped (the host checks first).
extern "C" __global__ void store_rows_bf16(bf16_t* cache, const bf16_t* x, int row, int capacity, const int* posp, int pos0) {
	const int t = blockIdx.x;
	const int p = ft_pos(posp, pos0) + t;
	if (p < 0 || p >= capacity) return;
	bf16_t* dst = cache + (usize)p * row;
	const bf16_t* src = x + (usize)t * row;
	for (int j = threadIdx.x; j < row; j += blockDim.x) dst[j] = src[j];
}

// cast_any: dst[i] = src[i] converted between F32, F16 and BF16 (element
// codes as runtime.DType: 1, 2, 3), rounding to nearest even.
extern "C" __global__ void cast_any(void* dst, int dt, const void* src, int st, long long n) {
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
		store_from_f32(dst, dt, (usize)i, load_as_f32(src, st, (usize)i));
}

__device__ __forceinline__ unsigned long long splitmix64(unsigned long long x) {
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

// fill_uniform_bf16: dst[i] = bf16(lo + (hi−lo)·u_i), u_i uniform in [0,1)
// from splitmix64(seed ⊕ i) (benchmark weights made on the device).
extern "C" __global__ void fill_uniform_bf16(bf16_t* dst, long long n, unsigned long long seed, float lo, float hi) {
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
		const unsigned long long x = splitmix64(seed ^ ((unsigned long long)i * 0xd1342543de82ef95ull));
		const float u = (float)(x >> 40) * (1.0f / 16777216.0f);
		dst[i] = f2bf(lo + (hi - lo) * u);
	}
}

// argmax_better: whether candidate (ov, oi) beats (bv, bi) under
// argmax_rows' rule: a chosen index (≥ 0) beats none, a larger value wins,
// equal values go to the smaller index.
__device__ __forceinline__ bool argmax_better(float ov, int oi, float bv, int bi) {
	return oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi));
}

// argmax_take folds element i of value v into the pick (bv, bi) under
// argmax_rows' rule (a larger value wins, the first of equal ones when
// taken in increasing i; −Inf is never chosen), or sets bad for a NaN or
// +Inf.
__device__ __forceinline__ void argmax_take(float v, int i, float& bv, int& bi, bool& bad) {
	if (v != v || v == FT_INF) {
		bad = true;
		return;
	}
	if (v == -FT_INF) return;
	if (bi < 0 || v > bv) {
		bv = v;
		bi = i;
	}
}

// argmax_scan: this thread's pick among x[base + i] (F32 or BF16, dt) for
// i = from, from + blockDim.x, … < to under argmax_rows' rule (a larger
// value wins, the first of equal ones; −Inf is never chosen: bi stays −1),
// and whether it met a NaN or +Inf (bad). The loads go out ARGMAX_U at a
// time before any is compared (one loop iteration a load waited for its
// value first: s29c's block trace had argmax_rows_split's 32 blocks of 256
// threads, 16 elements a thread, take ~9 µs of the FP8 step); the
// elements are still taken in increasing i, so the pick is the same.
#define ARGMAX_U 8
template <int DT>
__device__ __forceinline__ void argmax_scan_dt(const void* x, usize base, int from, int to, float& bv, int& bi, bool& bad) {
	const int step = blockDim.x;
	int i = from;
	for (; i + (ARGMAX_U - 1) * step < to; i += ARGMAX_U * step) {
		float v[ARGMAX_U];
#pragma unroll
		for (int u = 0; u < ARGMAX_U; u++) v[u] = load_as_f32(x, DT, base + i + u * step);
#pragma unroll
		for (int u = 0; u < ARGMAX_U; u++) argmax_take(v[u], i + u * step, bv, bi, bad);
	}
	for (; i < to; i += step) argmax_take(load_as_f32(x, DT, base + i), i, bv, bi, bad);
}
__device__ __forceinline__ void argmax_scan(const void* x, int dt, usize base, int from, int to, float& bv, int& bi,
		bool& bad) {
	bv = -FT_INF;
	bi = -1;
	bad = false;
	if (dt == FT_F32)
		argmax_scan_dt<FT_F32>(x, base, from, to, bv, bi, bad);
	else if (dt == FT_F16)
		argmax_scan_dt<FT_F16>(x, base, from, to, bv, bi, bad);
	else
		argmax_scan_dt<FT_BF16>(x, base, from, to, bv, bi, bad);
}

// argmax_block: the block's (value, index) under argmax_better from each
// thread's (bv, bi), valid in thread 0; sv/si are 32-entry shared scratch.
__device__ __forceinline__ void argmax_block(float& bv, int& bi, float* sv, int* si) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		const float ov = __shfl_xor_sync(FT_FULL, bv, o);
		const int oi = __shfl_xor_sync(FT_FULL, bi, o);
		if (argmax_better(ov, oi, bv, bi)) {
			bv = ov;
			bi = oi;
		}
	}
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	if (lane == 0) {
		sv[w] = bv;
		si[w] = bi;
	}
	__syncthreads();
	if (w == 0) {
		bv = lane < nw ? sv[lane] : -FT_INF;
		bi = lane < nw ? si[lane] : -1;
#pragma unroll
		for (int o = 16; o > 0; o >>= 1) {
			const float ov = __shfl_xor_sync(FT_FULL, bv, o);
			const int oi = __shfl_xor_sync(FT_FULL, bi, o);
			if (argmax_better(ov, oi, bv, bi)) {
				bv = ov;
				bi = oi;
			}
		}
	}
}

// argmax_rows: out[r] = the first index of the largest value of row r of
// x[R,n], x in F32 or BF16 (dt), one block (a multiple of 32 threads, at most
// 1024) per row; −1 when the row holds a NaN or +Inf (no greedy choice: the
// caller reads the row to say which) or only −Inf.
extern "C" __global__ void argmax_rows(int* out, const void* x, int dt, int n) {
	ft_pdl_wait();
	__shared__ float sv[32];
	__shared__ int si[32];
	__shared__ int sbad;
	if (threadIdx.x == 0) sbad = 0;
	__syncthreads();
	const usize base = (usize)blockIdx.x * n;
	float bv;
	int bi;
	bool bad;
	argmax_scan(x, dt, base, threadIdx.x, n, bv, bi, bad);
	if (bad) sbad = 1;
	argmax_block(bv, bi, sv, si);  // its __syncthreads orders the sbad stores before thread 0 reads it
	if (threadIdx.x == 0) out[blockIdx.x] = sbad ? -1 : bi;
}

// argmax_split: one block's share of a row's pick split over gridDim.x
// blocks. Block b scans the row's elements [b·chunk, (b+1)·chunk) (row at
// x + base, n elements) with blockDim (a multiple of 32, at most 1024)
// threads and stores its (value, index, bad) in pv/pi/pbad[b]; the block
// that finishes last (counted in *done, "last block done" as in
// normtail.cu: release fence + atomicAdd, acquire fence, .cg loads; it
// resets *done to 0 for the next launch or replay) combines them in block
// order, so ties keep the first index, under argmax_rows' rule (−1 when any
// element is a NaN or +Inf, or all are −Inf). Returns, in thread 0 of that
// block, the pick; −2 in every other block and thread.
__device__ __forceinline__ int argmax_split(const void* x, int dt, usize base, int n, int chunk, float* pv, int* pi,
		int* pbad, unsigned* done) {
	__shared__ float sv[32];
	__shared__ int si[32];
	__shared__ int sbad;
	__shared__ bool last;
	if (threadIdx.x == 0) sbad = 0;
	__syncthreads();
	const int lo = blockIdx.x * chunk, hi = min(n, lo + chunk);
	float bv;
	int bi;
	bool bad;
	argmax_scan(x, dt, base, lo + threadIdx.x, hi, bv, bi, bad);
	if (bad) sbad = 1;
	argmax_block(bv, bi, sv, si);  // its __syncthreads orders the sbad stores before thread 0 reads it
	if (threadIdx.x == 0) {
		pv[blockIdx.x] = bv;
		pi[blockIdx.x] = bi;
		pbad[blockIdx.x] = sbad;
	}
	__threadfence();  // release the partials
	__syncthreads();
	if (threadIdx.x == 0) last = atomicAdd(done, 1u) == gridDim.x - 1;
	__syncthreads();
	if (!last) return -2;
	__threadfence();  // acquire: every block's partials are visible from here on
	bv = -FT_INF;
	bi = -1;
	bad = false;
	for (int b = threadIdx.x; b < (int)gridDim.x; b += blockDim.x) {
		const float ov = __ldcg(pv + b);
		const int oi = __ldcg(pi + b);
		bad |= __ldcg(pbad + b) != 0;
		if (argmax_better(ov, oi, bv, bi)) {
			bv = ov;
			bi = oi;
		}
	}
	__syncthreads();  // the first argmax_block's readers of sv/si/sbad are done
	if (threadIdx.x == 0) sbad = 0;
	__syncthreads();
	if (bad) sbad = 1;
	argmax_block(bv, bi, sv, si);
	if (threadIdx.x != 0) return -2;
	atomicExch(done, 0u);
	return sbad ? -1 : bi;
}

// argmax_rows_split: argmax_rows for rows too few to fill the device with
// a block each: row r = blockIdx.y of x[R,n] split over gridDim.x blocks of
// chunk elements (argmax_split; pv/pi/pbad hold gridDim.x partials a row,
// done a counter a row, all zero before the first launch).
extern "C" __global__ void argmax_rows_split(int* out, const void* x, int dt, int n, int chunk, float* pv, int* pi,
		int* pbad, unsigned* done) {
	ft_pdl_wait();
	const int r = blockIdx.y;
	const usize off = (usize)r * gridDim.x;
	const int id = argmax_split(x, dt, (usize)r * n, n, chunk, pv + off, pi + off, pbad + off, done + r);
	if (id != -2) out[r] = id;
}

// argmax_feed: the greedy pick of one row x[n] (F32 or BF16, dt) by many
// blocks, for device-fed decoding (kernels.TokenFeeder; cudabackend
// feed.go): argmax_split over gridDim.x blocks of chunk elements. The block
// that finishes last then writes, with *seq the number of earlier launches
// (a counter only this kernel writes) and step[0] the position p this step
// ran at: ring[*seq & mask] = the pick (host memory mapped into the device,
// read after the step's event; the host counts the launches too), *seq + 1,
// step[1] = the pick (0 for −1, so the next step embeds a valid id; the
// host discards that step) and step[0] = p + 1.
// Every kernel of the step that reads step[] has completed before this
// one's ft_pdl_wait returns, and the next step's kernels start after this
// one has completed (the next graph launch).
extern "C" __global__ void argmax_feed(const void* x, int dt, int n, int chunk, float* pv, int* pi, int* pbad,
		unsigned* done, unsigned* seq, int* step, int* ring, int mask) {
	ft_pdl_wait();
	const int id = argmax_split(x, dt, 0, n, chunk, pv, pi, pbad, done);
	if (id == -2) return;
	const int p = __ldcg(step);
	const unsigned q = __ldcg(seq);
	*seq = q + 1u;
	ring[q & (unsigned)mask] = id;
	step[1] = id < 0 ? 0 : id;
	step[0] = p + 1;
	__threadfence_system();  // the ring's store reaches host memory before the grid completes
}

// add_f32: out[i] = a[i] + b[i] in fp32 (the residual stream); out may alias a or b.
extern "C" __global__ void add_f32(float* out, const float* a, const float* b, long long n) {
	ft_pdl_wait();
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
		out[i] = a[i] + b[i];
}

// add_f32_v4 is add_f32 on 4 values per thread (n4 = n/4 vectors, 16-byte aligned).
extern "C" __global__ void add_f32_v4(float4* out, const float4* a, const float4* b, long long n4) {
	ft_pdl_wait();
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
		const float4 x = a[i], y = b[i];
		out[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
	}
}

// embedding_f32out: out[t,c] = float(table[ids[t],c]) for t = blockIdx.x (the
// fp32 residual stream); ids outside [0, vocab) give NaN rows. A row
// spreads over gridDim.y blocks, as in embedding_bf16.
extern "C" __global__ void embedding_f32out(float* out, const bf16_t* table, const int* ids, int dim, int vocab) {
	ft_pdl_wait();
	const int t = blockIdx.x;
	const int id = ids[t];
	float* o = out + (usize)t * dim;
	const int c0 = blockIdx.y * blockDim.x + threadIdx.x, step = gridDim.y * blockDim.x;
	if (id < 0 || id >= vocab) {
		for (int c = c0; c < dim; c += step) o[c] = __int_as_float(0x7fc00000);
		return;
	}
	const bf16_t* r = table + (usize)id * dim;
	for (int c = c0; c < dim; c += step) o[c] = bf2f(r[c]);
}

// add_bias_bf16: x[i] += bias[i mod N] for i < n, a projection's bias added
// to each of its rows of width N (fp32 add, one bf16 rounding).
extern "C" __global__ void add_bias_bf16(bf16_t* x, const bf16_t* bias, long long n, int N) {
	ft_pdl_wait();
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
		x[i] = f2bf(bf2f(x[i]) + bf2f(bias[i % N]));
}

// scale_bf16: x[i] *= s for i < n (fp32 multiply, one bf16 rounding).
extern "C" __global__ void scale_bf16(bf16_t* x, long long n, float s) {
	ft_pdl_wait();
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
		x[i] = f2bf(bf2f(x[i]) * s);
}
