//go:build cuda

package cuda

/*
#include <cuda.h>
#include <cublas_v2.h>

// ft_gemm_rm_pair is ft_gemm_rm (cgo.go) for two weights of one shape and
// one input in one strided-batched call: c_i[M,N] = a[M,K]·b_i[N,K]ᵀ for
// i = 0, 1, b_1 = b_0 + sb elements and c_1 = c_0 + sc elements.
static int ft_gemm_rm_pair(CUcontext ctx, cublasHandle_t h, CUstream s,
		CUdeviceptr c, int cBF16, long long sc, CUdeviceptr a, CUdeviceptr b, long long sb, int M, int N, int K) {
	CUcontext cur = NULL;
	if (cuCtxGetCurrent(&cur) != CUDA_SUCCESS) return -1;
	if (cur != ctx && cuCtxSetCurrent(ctx) != CUDA_SUCCESS) return -1;
	cublasStatus_t st = cublasSetStream(h, (cudaStream_t)s);
	if (st != CUBLAS_STATUS_SUCCESS) return (int)st;
	const float alpha = 1.0f, beta = 0.0f;
	st = cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K,
		&alpha, (const void*)b, CUDA_R_16BF, K, sb,
		(const void*)a, CUDA_R_16BF, K, 0,
		&beta, (void*)c, cBF16 ? CUDA_R_16BF : CUDA_R_32F, N, sc,
		2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	return (int)st;
}
*/
import "C"

import "fmt"

// GemmBF16Pair is GemmBF16 for two weights of the same shape [n,k] and one
// input, in one launch: c0 = a·w0ᵀ and c1 = a·w1ᵀ (row-major, bf16 a and
// w, fp32 accumulation, c in bf16 or fp32). A batched decode step's k and
// v projections are such a pair: two small GEMMs that each leave the GPU
// half idle. The four buffers may lie anywhere: cuBLAS takes the distances
// w1 − w0 and c1 − c0 as batch strides, which must be positive multiples of
// the element sizes (the pair is swapped to make the weights' positive);
// where the outputs' distance then is not, it runs two GEMMs.
func (b *BLAS) GemmBF16Pair(s *Stream, c0, c1 uintptr, cBF16 bool, a, w0, w1 uintptr, m, n, k int) error {
	if m <= 0 || n <= 0 || k <= 0 {
		return fmt.Errorf("cuBLAS GEMM pair %dx%dx%d: sizes must be positive", m, n, k)
	}
	if w1 < w0 {
		w0, w1, c0, c1 = w1, w0, c1, c0
	}
	cBytes := uintptr(2)
	if !cBF16 {
		cBytes = 4
	}
	if w1 == w0 || (w1-w0)%2 != 0 || c1 <= c0 || (c1-c0)%cBytes != 0 {
		if err := b.GemmBF16(s, c0, cBF16, a, w0, m, n, k); err != nil {
			return err
		}
		return b.GemmBF16(s, c1, cBF16, a, w1, m, n, k)
	}
	sb, sc := int64((w1-w0)/2), int64((c1-c0)/cBytes)
	bytes := 2*int64(m)*int64(k) + 4*int64(n)*int64(k) + 2*int64(cBytes)*int64(m)*int64(n)
	bf := C.int(0)
	if cBF16 {
		bf = 1
	}
	return b.dev.timed(s, fmt.Sprintf("cublasGemmStridedBatchedEx×2[m=%d,n=%d,k=%d]", m, n, k), bytes, func() error {
		st := C.ft_gemm_rm_pair(b.dev.ctx, b.h, s.s, C.CUdeviceptr(c0), bf, C.longlong(sc), C.CUdeviceptr(a), C.CUdeviceptr(w0),
			C.longlong(sb), C.int(m), C.int(n), C.int(k))
		if err := checkBLAS(fmt.Sprintf("cublasGemmStridedBatchedEx bf16 2×[%d,%d]x[%d,%d]T", m, k, n, k), C.int(st)); err != nil {
			return fmt.Errorf("%s: %w", b.dev.Name(), err)
		}
		return nil
	})
}
