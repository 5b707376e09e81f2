//go:build cuda

package cuda

/*
#include <cuda.h>
#include <cublas_v2.h>

// ft_gemm_rm_acc is ft_gemm_rm (cgo.go) into an fp32 c with beta = 1:
// c[M,N] += a[M,K]·b[N,K]ᵀ.
static int ft_gemm_rm_acc(CUcontext ctx, cublasHandle_t h, CUstream s,
		CUdeviceptr c, CUdeviceptr a, CUdeviceptr b, int M, int N, int K) {
	CUcontext cur = NULL;
	if (cuCtxGetCurrent(&cur) != CUDA_SUCCESS) return -1;
	if (cur != ctx && cuCtxSetCurrent(ctx) != CUDA_SUCCESS) return -1;
	cublasStatus_t st = cublasSetStream(h, (cudaStream_t)s);
	if (st != CUBLAS_STATUS_SUCCESS) return (int)st;
	const float alpha = 1.0f, beta = 1.0f;
	st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K,
		&alpha, (const void*)b, CUDA_R_16BF, K,
		(const void*)a, CUDA_R_16BF, K,
		&beta, (void*)c, CUDA_R_32F, N,
		CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	return (int)st;
}
*/
import "C"

import "fmt"

// GemmBF16Acc is GemmBF16 accumulating into an fp32 c (cuBLAS beta = 1):
// c[m,n] += a[m,k]·w[n,k]ᵀ, bf16 a and w, fp32 accumulation; the residual
// add of a prefill's o_proj and down_proj folded into the GEMM.
func (b *BLAS) GemmBF16Acc(s *Stream, c, a, w uintptr, m, n, k int) error {
	if m <= 0 || n <= 0 || k <= 0 {
		return fmt.Errorf("cuBLAS GEMM %dx%dx%d: sizes must be positive", m, n, k)
	}
	bytes := 2*int64(m)*int64(k) + 2*int64(n)*int64(k) + 8*int64(m)*int64(n)
	return b.dev.timed(s, fmt.Sprintf("cublasGemmEx+=[m=%d,n=%d,k=%d]", m, n, k), bytes, func() error {
		st := C.ft_gemm_rm_acc(b.dev.ctx, b.h, s.s, C.CUdeviceptr(c), C.CUdeviceptr(a), C.CUdeviceptr(w), C.int(m), C.int(n), C.int(k))
		if err := checkBLAS(fmt.Sprintf("cublasGemmEx bf16 [%d,%d]x[%d,%d]T += (beta 1)", m, k, n, k), C.int(st)); err != nil {
			return fmt.Errorf("%s: %w", b.dev.Name(), err)
		}
		return nil
	})
}
