// Temperature sampling on the device: a batch's draws need one int a row
// back instead of the whole logits.

// sample_rows: out[r] = a token drawn from row r of x[R,n] (F32 or BF16, dt)
// at inverse temperature inv_t[r] with the uniform draw u[r] in [0,1): with
// p_j = exp((x_j − max)·inv_t[r]), the first index i, in id order, whose
// running sum of p exceeds u[r]·Σp (the last index with p > 0 when rounding
// leaves none) — kernels.Sample's walk with neither top-k nor top-p. −1 when
// the row holds a NaN or +Inf or only −Inf. One block of 1024 threads per
// row; thread t owns the contiguous ids [t·c, (t+1)·c), c = ⌈n/1024⌉, so a
// block-wide prefix sum of the threads' sums finds the thread whose stretch
// holds the draw, and that thread walks it.
extern "C" __global__ void __launch_bounds__(1024) sample_rows(int* out, const void* x, int dt, int n, const float* inv_t, const float* u) {
	ft_pdl_wait();
	__shared__ float red[32];
	__shared__ float scan[1024];
	__shared__ int sbad, sfound, slast;
	const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, nw = blockDim.x >> 5;
	const usize base = (usize)blockIdx.x * n;
	if (tid == 0) {
		sbad = 0;
		sfound = -1;
		slast = -1;
	}
	__syncthreads();
	float mx = -FT_INF;
	bool bad = false;
	for (int i = tid; i < n; i += blockDim.x) {
		const float v = load_as_f32(x, dt, base + i);
		if (v != v || v == FT_INF) bad = true;
		else mx = fmaxf(mx, v);
	}
	if (bad) sbad = 1;
	mx = warp_max(mx);
	if (lane == 0) red[w] = mx;
	__syncthreads();
	if (w == 0) {
		float m = lane < nw ? red[lane] : -FT_INF;
		m = warp_max(m);
		if (lane == 0) red[0] = m;
	}
	__syncthreads();
	mx = red[0];
	if (sbad || mx == -FT_INF) { // block-uniform: every thread leaves here
		if (tid == 0) out[blockIdx.x] = -1;
		return;
	}
	const float it = inv_t[blockIdx.x];
	const int c = (n + blockDim.x - 1) / blockDim.x;
	const int lo = min(n, tid * c), hi = min(n, lo + c);
	float s = 0.f;
	int last = -1;
	for (int i = lo; i < hi; i++) {
		const float p = expf((load_as_f32(x, dt, base + i) - mx) * it);
		s += p;
		if (p > 0.f) last = i;
	}
	if (last >= 0) atomicMax(&slast, last);
	scan[tid] = s;
	__syncthreads();
	for (int off = 1; off < blockDim.x; off <<= 1) { // inclusive prefix sum
		const float t = tid >= off ? scan[tid - off] : 0.f;
		__syncthreads();
		scan[tid] += t;
		__syncthreads();
	}
	const float total = scan[blockDim.x - 1];
	const float target = u[blockIdx.x] * total;
	const float before = tid > 0 ? scan[tid - 1] : 0.f;
	if (target >= before && target < scan[tid]) {
		float run = before;
		int pick = last; // rounding in the walk: the stretch's last p > 0
		for (int i = lo; i < hi; i++) {
			run += expf((load_as_f32(x, dt, base + i) - mx) * it);
			if (target < run) {
				pick = i;
				break;
			}
		}
		sfound = pick;
	}
	__syncthreads();
	if (tid == 0) out[blockIdx.x] = sfound >= 0 ? sfound : slast;
}
