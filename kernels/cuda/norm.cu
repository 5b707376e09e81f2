// RMSNorm.

// rmsnorm_bf16: out[r,c] = x[r,c] / sqrt(mean_c(x[r,c]²) + eps) · w[c], one
// block per row r = blockIdx.x, sums in fp32; out may alias x.
extern "C" __global__ void rmsnorm_bf16(bf16_t* out, const bf16_t* x, const bf16_t* w, int dim, float eps) {
	__shared__ float sh[32];
	ft_pdl_wait();
	const bf16_t* xr = x + (usize)blockIdx.x * dim;
	bf16_t* orow = out + (usize)blockIdx.x * dim;
	float s = 0.f;
	for (int c = threadIdx.x; c < dim; c += blockDim.x) {
		const float v = bf2f(xr[c]);
		s += v * v;
	}
	s = block_sum(s, sh);
	const float scale = rsqrtf(s / (float)dim + eps);
	for (int c = threadIdx.x; c < dim; c += blockDim.x) orow[c] = f2bf(bf2f(xr[c]) * scale * bf2f(w[c]));
}

// rmsnorm_row_v8 normalises one row of dim values (dim % 8 == 0, 16-byte
// aligned) from x into out with weight w, the block's threads striding over
// its 16-byte chunks; out may alias x.
__device__ __forceinline__ void rmsnorm_row_v8(bf16_t* out, const bf16_t* x, const bf16_t* w, int dim, float eps, float* sh) {
	const uint4* xr = (const uint4*)x;
	uint4* orow = (uint4*)out;
	const uint4* wv = (const uint4*)w;
	const int n8 = dim >> 3;
	float s = 0.f;
	for (int c = threadIdx.x; c < n8; c += blockDim.x) {
		float f[8];
		unpack8(xr[c], f);
#pragma unroll
		for (int e = 0; e < 8; e++) s += f[e] * f[e];
	}
	s = block_sum(s, sh);
	const float scale = rsqrtf(s / (float)dim + eps);
	for (int c = threadIdx.x; c < n8; c += blockDim.x) {
		float f[8], g[8];
		unpack8(xr[c], f);
		unpack8(wv[c], g);
		uint4 r;
		r.x = pack_bf16(f[0] * scale * g[0], f[1] * scale * g[1]);
		r.y = pack_bf16(f[2] * scale * g[2], f[3] * scale * g[3]);
		r.z = pack_bf16(f[4] * scale * g[4], f[5] * scale * g[5]);
		r.w = pack_bf16(f[6] * scale * g[6], f[7] * scale * g[7]);
		orow[c] = r;
	}
}

// rmsnorm_bf16_v8 is rmsnorm_bf16 with 16-byte loads (dim % 8 == 0, rows
// 16-byte aligned).
extern "C" __global__ void rmsnorm_bf16_v8(bf16_t* out, const bf16_t* x, const bf16_t* w, int dim, float eps) {
	__shared__ float sh[32];
	ft_pdl_wait();
	rmsnorm_row_v8(out + (usize)blockIdx.x * dim, x + (usize)blockIdx.x * dim, w, dim, eps, sh);
}

// rmsnorm_f32in_bf16 is rmsnorm_bf16 reading an fp32 x (the residual stream)
// and writing bf16: out[r,c] = bf16(x[r,c] / sqrt(mean_c(x[r,c]²) + eps) · w[c]).
// dim % 4 == 0 and x rows 16-byte aligned. The sums, their order and the
// roundings (rms_sq4, rms_scale, rms_out) are those of the GEMVs that fold
// this norm in (gemv.cu's norm_x_smem) at the same block size.
extern "C" __global__ void rmsnorm_f32in_bf16(bf16_t* out, const float* x, const bf16_t* w, int dim, float eps) {
	__shared__ float sh[32];
	ft_pdl_wait();
	const float4* xr = (const float4*)(x + (usize)blockIdx.x * dim);
	unsigned* orow = (unsigned*)(out + (usize)blockIdx.x * dim);
	const unsigned* wv = (const unsigned*)w;
	const int n4 = dim >> 2;
	float s = 0.f;
	for (int c = threadIdx.x; c < n4; c += blockDim.x) s = rms_sq4(s, xr[c]);
	s = block_sum(s, sh);
	const float scale = rms_scale(s, dim, eps);
	for (int c = threadIdx.x; c < n4; c += blockDim.x) {
		const float4 v = xr[c];
		const unsigned w0 = wv[2 * c], w1 = wv[2 * c + 1];
		orow[2 * c] = pack_bf16(rms_out(v.x, scale, __uint_as_float(w0 << 16)), rms_out(v.y, scale, __uint_as_float(w0 & 0xffff0000u)));
		orow[2 * c + 1] = pack_bf16(rms_out(v.z, scale, __uint_as_float(w1 << 16)), rms_out(v.w, scale, __uint_as_float(w1 & 0xffff0000u)));
	}
}

// add_rmsnorm_f32_bf16 fuses the residual add with the RMSNorm after it:
// x[r,:] += y[r,:] (fp32, in place), then out[r,:] = bf16(x[r,:] /
// sqrt(mean(x[r,:]²) + eps) · w), the same values (same sums in the same
// order) as add_f32_v4 then rmsnorm_f32in_bf16 at the same block size. One
// block per row; dim % 4 == 0, x and y rows 16-byte aligned.
extern "C" __global__ void add_rmsnorm_f32_bf16(bf16_t* out, float* x, const float* y, const bf16_t* w, int dim, float eps) {
	__shared__ float sh[32];
	ft_pdl_wait();
	float4* xr = (float4*)(x + (usize)blockIdx.x * dim);
	const float4* yr = (const float4*)(y + (usize)blockIdx.x * dim);
	unsigned* orow = (unsigned*)(out + (usize)blockIdx.x * dim);
	const unsigned* wv = (const unsigned*)w;
	const int n4 = dim >> 2;
	float s = 0.f;
	for (int c = threadIdx.x; c < n4; c += blockDim.x) {
		float4 v = xr[c];
		const float4 u = yr[c];
		v.x += u.x;
		v.y += u.y;
		v.z += u.z;
		v.w += u.w;
		xr[c] = v;
		s = rms_sq4(s, v);
	}
	s = block_sum(s, sh);
	const float scale = rms_scale(s, dim, eps);
	for (int c = threadIdx.x; c < n4; c += blockDim.x) {
		const float4 v = xr[c];  // this thread's own write above
		const unsigned w0 = wv[2 * c], w1 = wv[2 * c + 1];
		orow[2 * c] = pack_bf16(rms_out(v.x, scale, __uint_as_float(w0 << 16)), rms_out(v.y, scale, __uint_as_float(w0 & 0xffff0000u)));
		orow[2 * c + 1] = pack_bf16(rms_out(v.z, scale, __uint_as_float(w1 << 16)), rms_out(v.w, scale, __uint_as_float(w1 & 0xffff0000u)));
	}
}

// rmsnorm_pair_bf16_v8 normalises, in place, rows 0..na−1 of a with weight
// wa and then the rows of b with wb (blockIdx.x ≥ na: row blockIdx.x − na of
// b): a layer's per-head q and k norms in one launch, each row exactly as
// rmsnorm_bf16_v8 computes it (dim % 8 == 0, 16-byte aligned).
extern "C" __global__ void rmsnorm_pair_bf16_v8(bf16_t* a, const bf16_t* wa, int na, bf16_t* b, const bf16_t* wb, int dim, float eps) {
	__shared__ float sh[32];
	ft_pdl_wait();
	const bool first = (int)blockIdx.x < na;
	bf16_t* x = first ? a + (usize)blockIdx.x * dim : b + (usize)(blockIdx.x - na) * dim;
	rmsnorm_row_v8(x, x, first ? wa : wb, dim, eps, sh);
}
