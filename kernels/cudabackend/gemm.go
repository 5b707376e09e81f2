//go:build cuda

package cudabackend

// gemm runs the backend's BF16 GEMMs: out[T,N] = x[T,D]·w[N,D]ᵀ (acc false;
// out bf16 or fp32) or out += x·wᵀ (acc true; out fp32), fp32 accumulation;
// by the tuned cuBLASLt path (GEMMTuned, the default) or cublasGemmEx
// (GEMMCublas, FT_GEMM=cublas).
func (b *Backend) gemm(out uintptr, outBF16 bool, x, w uintptr, T, N, D int, acc bool) error {
	if b.GEMM == GEMMCublas {
		if acc {
			return b.blas.GemmBF16Acc(b.s, out, x, w, T, N, D)
		}
		return b.blas.GemmBF16(b.s, out, outBF16, x, w, T, N, D)
	}
	return b.blas.GemmBF16Tuned(b.s, out, outBF16, x, w, T, N, D, acc)
}
