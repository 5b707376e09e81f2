// Mixture-of-experts row ops (kernels.MoEKernels): an expert runs over the
// rows of the tokens routed to it; its output rows are added back scaled
// by the routing weights.

// moe_gather_rows_u16: dst[i,c] = src[r,c] for i = blockIdx.x, c < width,
// r = rows[i] (row0 when rows is null: one row); 16-bit elements (a row of
// F32 is 2·width of them).
extern "C" __global__ void moe_gather_rows_u16(unsigned short* dst, const unsigned short* src, const int* rows, int row0, int width) {
	const int i = blockIdx.x;
	const int r = rows ? rows[i] : row0;
	const unsigned short* s = src + (usize)r * width;
	unsigned short* d = dst + (usize)i * width;
	for (int c = threadIdx.x; c < width; c += blockDim.x) d[c] = s[c];
}

// moe_scatter_add_f32: dst[r,c] += w·src[i,c] for i = blockIdx.x, c < width,
// r = rows[i] and w = weights[i] (row0 and w0 when rows is null: one row).
// The rows of one launch are distinct, so no two blocks write one row.
extern "C" __global__ void moe_scatter_add_f32(float* dst, const float* src, const int* rows, const float* weights, int row0, float w0,
                                               int width) {
	const int i = blockIdx.x;
	const int r = rows ? rows[i] : row0;
	const float w = rows ? weights[i] : w0;
	const float* s = src + (usize)i * width;
	float* d = dst + (usize)r * width;
	for (int c = threadIdx.x; c < width; c += blockDim.x) d[c] += w * s[c];
}
