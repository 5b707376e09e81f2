// RMSNorm of the fp32 residual stream over many rows (a prefill, a packed
// batch): the kernels of norm.cu (rmsnorm_f32in_bf16, add_rmsnorm_f32_bf16)
// give a row one block of up to 1024 threads that reads it, reduces, and
// reads it again; at 1024 threads only two rows are in flight per SM. These
// give a row a quarter of that block, each thread holding four of the old
// kernel's threads' values in registers, so the row is read once and four
// times as many rows are in flight.
//
// Bit-equality with norm.cu: for rows of dim values norm.cu runs OT =
// rmsF32Threads(dim) threads (Go side), thread o summing (rms_sq4) the
// float4 chunks o, o+OT, o+2·OT, … < dim/4, then block_sum (warp_sum per
// warp of 32 old threads, the 32 warp sums in shared memory, warp_sum of
// those). Here a block has B = OT/4 threads (OT % 128 == 0) and thread t
// plays old threads t, t+B, t+2B, t+3B: it keeps their sums apart, each
// warp reduces each of the four with warp_sum (the lanes of new warp w for
// old thread t+iB are exactly those of old warp w+i·B/32) and writes it to
// that old warp's slot, and one warp_sum over the slots ends it: the same
// additions in the same order, so the same bits. J is the number of chunks
// an old thread takes (dim/4 ≤ J·OT).

// rms_rows_f32 normalises row blockIdx.x of x (fp32, dim values) into out
// (bf16) with weight w: with ADD, x += y first (y fp32, or bf16 when YB16),
// the sum written back to x. ot is norm.cu's block size for dim.
template <int J, bool ADD, bool YB16>
__device__ __forceinline__ void rms_rows_f32(bf16_t* out, float* x, const void* y, const bf16_t* w, int dim, float eps, int ot) {
	__shared__ float sh[32];
	ft_pdl_wait();
	const int B = blockDim.x, t = threadIdx.x, lane = t & 31, wp = t >> 5;
	const int n4 = dim >> 2;
	float4* xr = (float4*)(x + (usize)blockIdx.x * dim);
	float4 v[4][J];
	float s[4];
#pragma unroll
	for (int i = 0; i < 4; i++) {
		s[i] = 0.f;
#pragma unroll
		for (int j = 0; j < J; j++) {
			const int c = t + i * B + j * ot;
			if (c < n4) v[i][j] = xr[c];
		}
	}
	if (ADD) {
#pragma unroll
		for (int i = 0; i < 4; i++) {
#pragma unroll
			for (int j = 0; j < J; j++) {
				const int c = t + i * B + j * ot;
				if (c < n4) {
					float4 u;
					if (YB16) {
						const uint2 p = ((const uint2*)((const bf16_t*)y + (usize)blockIdx.x * dim))[c];
						u = make_float4(__uint_as_float(p.x << 16), __uint_as_float(p.x & 0xffff0000u), __uint_as_float(p.y << 16),
							__uint_as_float(p.y & 0xffff0000u));
					} else {
						u = ((const float4*)((const float*)y + (usize)blockIdx.x * dim))[c];
					}
					v[i][j].x += u.x;
					v[i][j].y += u.y;
					v[i][j].z += u.z;
					v[i][j].w += u.w;
					xr[c] = v[i][j];
				}
			}
		}
	}
#pragma unroll
	for (int i = 0; i < 4; i++) {
#pragma unroll
		for (int j = 0; j < J; j++) {
			const int c = t + i * B + j * ot;
			if (c < n4) s[i] = rms_sq4(s[i], v[i][j]);
		}
	}
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const float p = warp_sum(s[i]);
		if (lane == 0) sh[wp + i * (B >> 5)] = p;
	}
	__syncthreads();
	const float tot = warp_sum(lane < (ot >> 5) ? sh[lane] : 0.f);
	const float scale = rms_scale(tot, dim, eps);
	const uint2* wv = (const uint2*)w;
	uint2* orow = (uint2*)(out + (usize)blockIdx.x * dim);
#pragma unroll
	for (int i = 0; i < 4; i++) {
#pragma unroll
		for (int j = 0; j < J; j++) {
			const int c = t + i * B + j * ot;
			if (c < n4) {
				const uint2 g = wv[c];
				const float4 a = v[i][j];
				orow[c] = make_uint2(pack_bf16(rms_out(a.x, scale, __uint_as_float(g.x << 16)), rms_out(a.y, scale, __uint_as_float(g.x & 0xffff0000u))),
					pack_bf16(rms_out(a.z, scale, __uint_as_float(g.y << 16)), rms_out(a.w, scale, __uint_as_float(g.y & 0xffff0000u))));
			}
		}
	}
}

// rmsnorm_f32in_bf16_rows_j1 is rmsnorm_f32in_bf16 (same bits) at a quarter
// of its block size: blockDim.x = ot/4, ot = that kernel's block size, a
// multiple of 128, dim/4 ≤ ot; one block per row; x rows 16-byte aligned,
// out and w 8-byte aligned.
extern "C" __global__ void rmsnorm_f32in_bf16_rows_j1(bf16_t* out, const float* x, const bf16_t* w, int dim, float eps, int ot) {
	rms_rows_f32<1, false, false>(out, (float*)x, nullptr, w, dim, eps, ot);
}

// rmsnorm_f32in_bf16_rows_j2 is rmsnorm_f32in_bf16_rows_j1 for dim/4 ≤ 2·ot.
extern "C" __global__ void rmsnorm_f32in_bf16_rows_j2(bf16_t* out, const float* x, const bf16_t* w, int dim, float eps, int ot) {
	rms_rows_f32<2, false, false>(out, (float*)x, nullptr, w, dim, eps, ot);
}

// add_rmsnorm_f32_bf16_rows_j1 is add_rmsnorm_f32_bf16 (same bits: x += y
// in fp32, in place, then out = RMSNorm(x)·w) at the block size and layout
// of rmsnorm_f32in_bf16_rows_j1.
extern "C" __global__ void add_rmsnorm_f32_bf16_rows_j1(bf16_t* out, float* x, const float* y, const bf16_t* w, int dim, float eps, int ot) {
	rms_rows_f32<1, true, false>(out, x, y, w, dim, eps, ot);
}

// add_rmsnorm_f32_bf16_rows_j2 is add_rmsnorm_f32_bf16_rows_j1 for dim/4 ≤ 2·ot.
extern "C" __global__ void add_rmsnorm_f32_bf16_rows_j2(bf16_t* out, float* x, const float* y, const bf16_t* w, int dim, float eps, int ot) {
	rms_rows_f32<2, true, false>(out, x, y, w, dim, eps, ot);
}

// add_rmsnorm_bf16y_rows_j1 is add_rmsnorm_f32_bf16_rows_j1 with a bf16 y
// (a projection's product in bf16, widened exactly before the fp32 add): x
// += y, out = RMSNorm(x)·w. y rows 8-byte aligned; out may alias y (each
// thread reads its chunks of y before it writes the same chunks of out).
extern "C" __global__ void add_rmsnorm_bf16y_rows_j1(bf16_t* out, float* x, const bf16_t* y, const bf16_t* w, int dim, float eps, int ot) {
	rms_rows_f32<1, true, true>(out, x, y, w, dim, eps, ot);
}

// add_rmsnorm_bf16y_rows_j2 is add_rmsnorm_bf16y_rows_j1 for dim/4 ≤ 2·ot.
extern "C" __global__ void add_rmsnorm_bf16y_rows_j2(bf16_t* out, float* x, const bf16_t* y, const bf16_t* w, int dim, float eps, int ot) {
	rms_rows_f32<2, true, true>(out, x, y, w, dim, eps, ot);
}
