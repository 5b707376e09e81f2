// The fused FP8 MLP of a prefill (kernels.FP8MLPer, cudabackend/fp8mlp.go):
// the gate and up GEMMs (cuBLASLt, E4M3 codes, fp32 accumulation) leave
// their unscaled products in bf16; fp8_silu_quant_rows applies the token
// and channel scales, computes silu(gate)·up in fp32 and quantizes each row
// to E4M3 for the down GEMM; the down GEMM's unscaled product is then
// rescaled in place (fp8_rescale, fp8gemm.cu) or rescaled and added into
// the fp32 residual stream (fp8_rescale_add). Uses silu_mul1
// (elementwise.cu), f2e4m3x8 and QUANT_HELD (fp8gemm.cu).

// load8_scales widens the 8 scales s[i..i+7] (code sdt as load_as_f32; i a
// multiple of 8, s 16-byte aligned) with 16-byte loads.
__device__ __forceinline__ void load8_scales(const void* s, int sdt, int i, float* f) {
	if (sdt == FT_F32) {
		const float4* p = reinterpret_cast<const float4*>((const float*)s + i);
		const float4 a = p[0], b = p[1];
		f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
		f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
		return;
	}
	const uint4 v = *reinterpret_cast<const uint4*>((const unsigned short*)s + i);
	if (sdt == FT_BF16) {
		unpack8(v, f);
		return;
	}
	const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
	for (int j = 0; j < 4; j++) {
		f[2 * j] = h2f((f16_t)(w[j] & 0xffffu));
		f[2 * j + 1] = h2f((f16_t)(w[j] >> 16));
	}
}

// silu_group computes the 8 values h[c..c+7] of row r: gate and up
// unscaled products (bf16) times a·sg and a·su, then silu(g)·u, all fp32 —
// kernels.SiLUQuantRowsFP8's arithmetic.
__device__ __forceinline__ void silu_group(float* h, const bf16_t* __restrict__ g, const bf16_t* __restrict__ u, float a,
		const void* sg, const void* su, int sdt, usize row, int K, int c) {
	float gf[8], uf[8], sgf[8], suf[8];
	unpack8(*reinterpret_cast<const uint4*>(g + row * K + c), gf);
	unpack8(*reinterpret_cast<const uint4*>(u + row * K + c), uf);
	load8_scales(sg, sdt, c, sgf);
	load8_scales(su, sdt, c, suf);
#pragma unroll
	for (int k = 0; k < 8; k++) h[k] = silu_mul1(__fmul_rn(gf[k], __fmul_rn(a, sgf[k])), __fmul_rn(uf[k], __fmul_rn(a, suf[k])));
}

// fp8_silu_quant_rows: for g, u [T,K] bf16 (the unscaled gate and up
// products), as[T] the token scales of their quantized input and sg, su
// [K] the channel scales (code sdt, 16-byte aligned; K % 8 == 0, g, u, q
// 16-byte aligned): h = silu(g·(as[r]·sg[c]))·(u·(as[r]·su[c])) in fp32,
// then per row s = max|h[r,:]|/448 (1 when that is 0 or not finite),
// q[r,c] = E4M3(h[r,c]/s), hs[r] = s — quant_rows_e4m3 of h without
// rounding h to bf16 first (kernels.SiLUQuantRowsFP8, up to expf). One
// block of 256 threads per row; rows up to 256·8·QUANT_HELD values keep h
// in registers between the maximum and the codes, longer ones recompute
// the rest.
extern "C" __global__ void __launch_bounds__(256) fp8_silu_quant_rows(unsigned char* __restrict__ q, float* __restrict__ hs,
		const bf16_t* __restrict__ g, const bf16_t* __restrict__ u, const float* __restrict__ as, const void* sg,
		const void* su, int sdt, int T, int K) {
	__shared__ float sh[32];
	const usize row = blockIdx.x;
	if ((int)row >= T) return;
	const float a = as[row];
	uint2* qr = reinterpret_cast<uint2*>(q + row * K);
	const int nv = K >> 3;
	float held[QUANT_HELD][8];
	float m = 0.f;
#pragma unroll
	for (int j = 0; j < QUANT_HELD; j++) {
		const int i = threadIdx.x + j * blockDim.x;
		if (i < nv) {
			silu_group(held[j], g, u, a, sg, su, sdt, row, K, i << 3);
#pragma unroll
			for (int k = 0; k < 8; k++) m = fmaxf(m, fabsf(held[j][k])); // fmaxf drops NaN, as the Go loop does
		}
	}
	for (int i = threadIdx.x + QUANT_HELD * blockDim.x; i < nv; i += blockDim.x) {
		float f[8];
		silu_group(f, g, u, a, sg, su, sdt, row, K, i << 3);
#pragma unroll
		for (int k = 0; k < 8; k++) m = fmaxf(m, fabsf(f[k]));
	}
	const float s = e4m3_row_scale(m, sh);
	if (threadIdx.x == 0) hs[row] = s;
#pragma unroll
	for (int j = 0; j < QUANT_HELD; j++) {
		const int i = threadIdx.x + j * blockDim.x;
		if (i < nv) {
			float f[8];
#pragma unroll
			for (int k = 0; k < 8; k++) f[k] = __fdiv_rn(held[j][k], s);
			qr[i] = f2e4m3x8(f);
		}
	}
	for (int i = threadIdx.x + QUANT_HELD * blockDim.x; i < nv; i += blockDim.x) {
		float f[8];
		silu_group(f, g, u, a, sg, su, sdt, row, K, i << 3);
#pragma unroll
		for (int k = 0; k < 8; k++) f[k] = __fdiv_rn(f[k], s);
		qr[i] = f2e4m3x8(f);
	}
}

// fp8_rescale_add: y[t,o] += c[t,o]·(as[t]·s(o)) over y, c [T,N] fp32 (c
// the unscaled product, s the per-output-channel weight scales, code sdt as
// in load_as_f32): the product rounded to fp32 once, then the sum once —
// fp8_rescale then add_f32, in one pass. N % 8 == 0, y and c 16-byte
// aligned; grid-stride over groups of 8 elements.
extern "C" __global__ void __launch_bounds__(256) fp8_rescale_add(float* __restrict__ y, const float* __restrict__ c,
		const float* __restrict__ as, const void* __restrict__ ws, int sdt, int T, int N) {
	const usize groups = (usize)T * (usize)(N >> 3);
	for (usize g = (usize)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += (usize)gridDim.x * blockDim.x) {
		const usize e = g << 3;
		const int t = (int)(e / (usize)N), o = (int)(e % (usize)N);
		const float a = as[t];
		const float4* cp = reinterpret_cast<const float4*>(c + e);
		float4* yp = reinterpret_cast<float4*>(y + e);
		const float4 c0 = cp[0], c1 = cp[1];
		float4 y0 = yp[0], y1 = yp[1];
		const float cv[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
		float r[8];
#pragma unroll
		for (int j = 0; j < 8; j++) r[j] = __fmul_rn(cv[j], __fmul_rn(a, load_as_f32(ws, sdt, (usize)(o + j))));
		y0.x = __fadd_rn(y0.x, r[0]); y0.y = __fadd_rn(y0.y, r[1]); y0.z = __fadd_rn(y0.z, r[2]); y0.w = __fadd_rn(y0.w, r[3]);
		y1.x = __fadd_rn(y1.x, r[4]); y1.y = __fadd_rn(y1.y, r[5]); y1.z = __fadd_rn(y1.z, r[6]); y1.w = __fadd_rn(y1.w, r[7]);
		yp[0] = y0;
		yp[1] = y1;
	}
}
