// Column splits after a merged GEMM (cudabackend/merged.go): several
// projections of one input computed as one product into a scratch
// [rows, n0+n1+n2] are copied out to their own contiguous outputs, or a
// gate/up product [rows, 2I] is reduced to silu(gate)·up.

// split_cols copies src[t, c] to d0[t, c] (c < n0), d1[t, c-n0] (c < n0+n1)
// or d2[t, c-n0-n1], for E = one bf16 or a vector of 8 (then n0..n2 count vectors).
template <typename E>
__device__ __forceinline__ void split_cols(E* d0, E* d1, E* d2, const E* src, int n0, int n1, int n2, long long rows) {
	const long long n = (long long)n0 + n1 + n2;
	const long long total = rows * n;
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
		const long long t = i / n;
		const int c = (int)(i - t * n);
		const E v = src[i];
		if (c < n0) {
			d0[t * n0 + c] = v;
		} else if (c < n0 + n1) {
			d1[t * n1 + (c - n0)] = v;
		} else {
			d2[t * n2 + (c - n0 - n1)] = v;
		}
	}
}

// split_cols_bf16: src[rows, n0+n1+n2] split by columns into d0[rows,n0], d1[rows,n1], d2[rows,n2] (n2 may be 0, d2 then unused).
extern "C" __global__ void split_cols_bf16(bf16_t* d0, bf16_t* d1, bf16_t* d2, const bf16_t* src, int n0, int n1, int n2, long long rows) {
	split_cols<bf16_t>(d0, d1, d2, src, n0, n1, n2, rows);
}

// split_cols_bf16_v8 is split_cols_bf16 on vectors of 8 values: n0..n2 in vectors, every pointer 16-byte aligned.
extern "C" __global__ void split_cols_bf16_v8(uint4* d0, uint4* d1, uint4* d2, const uint4* src, int n0, int n1, int n2, long long rows) {
	split_cols<uint4>(d0, d1, d2, src, n0, n1, n2, rows);
}

// silu_mul_split_bf16: out[t, j] = g·σ(g)·u with g = src[t, j], u = src[t, I+j] (src [rows, 2I], out [rows, I]).
extern "C" __global__ void silu_mul_split_bf16(bf16_t* out, const bf16_t* src, int I, long long rows) {
	const long long total = rows * I;
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
		const long long t = i / I;
		const long long j = i - t * I;
		const bf16_t* r = src + t * 2 * I;
		out[i] = f2bf(silu_mul1(bf2f(r[j]), bf2f(r[I + j])));
	}
}

// silu_mul_split_bf16_v8 is silu_mul_split_bf16 on vectors of 8 values: I8 = I/8, pointers 16-byte aligned.
extern "C" __global__ void silu_mul_split_bf16_v8(uint4* out, const uint4* src, int I8, long long rows) {
	const long long total = rows * I8;
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
		const long long t = i / I8;
		const long long j = i - t * I8;
		const uint4* r = src + t * 2 * I8;
		float g[8], u[8];
		unpack8(r[j], g);
		unpack8(r[I8 + j], u);
		uint4 o;
		o.x = pack_bf16(silu_mul1(g[0], u[0]), silu_mul1(g[1], u[1]));
		o.y = pack_bf16(silu_mul1(g[2], u[2]), silu_mul1(g[3], u[3]));
		o.z = pack_bf16(silu_mul1(g[4], u[4]), silu_mul1(g[5], u[5]));
		o.w = pack_bf16(silu_mul1(g[6], u[6]), silu_mul1(g[7], u[7]));
		out[i] = o;
	}
}
