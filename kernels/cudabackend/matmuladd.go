//go:build cuda

package cudabackend

import (
	"fmt"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// MatMulAdd: y[T,N] += x[T,D]·w[N,D]ᵀ, y F32 (the residual stream), bf16 x
// and w, fp32 accumulation (kernels.MatMulAdder). One token: the persistent
// GEMV adding each row's sum to y (gemv_persist_pipe_f32acc, or gemv.cu's
// gemv_persist_f32acc with FT_GEMV=persist), bit for bit what
// MatMul into F32 then Add give; more tokens: a GEMM with beta = 1 (tuned cuBLASLt or cuBLAS, gemm.go).
func (b *Backend) MatMulAdd(y, x, w *runtime.Tensor) error {
	if err := b.weight("MatMulAdd", "w", w); err != nil {
		return err
	}
	if err := b.act("MatMulAdd", "x", x); err != nil {
		return err
	}
	if err := b.onDevice("MatMulAdd", "y", y); err != nil {
		return err
	}
	if y.DType() != runtime.F32 {
		return fmt.Errorf("cudabackend.MatMulAdd: y is %v, want F32", y.DType())
	}
	ws := w.Shape()
	if len(ws) != 2 {
		return fmt.Errorf("cudabackend.MatMulAdd: w %v, want [N,D]", ws)
	}
	N, D := ws[0], ws[1]
	if D == 0 || x.NumElements()%D != 0 {
		return fmt.Errorf("cudabackend.MatMulAdd: x %v does not have rows of w's %d columns (w %v)", x.Shape(), D, ws)
	}
	T := x.NumElements() / D
	if y.NumElements() != T*N {
		return fmt.Errorf("cudabackend.MatMulAdd: y %v, want %d×%d", y.Shape(), T, N)
	}
	if T == 0 || N == 0 {
		return nil
	}
	if T == 1 && D%8 == 0 && aligned16(x.Ptr(), w.Ptr()) {
		if ok, err := b.gemvBal(b.k.gemvAcc, N, D, gemvBytes(N, D, y)+int64(N)*4, cuda.Ptr(y.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(w.Ptr()), cuda.I32(N), cuda.I32(D)); ok {
			return err
		}
		f := b.gemvFn(b.k.gemvAcc, D)
		return f.LaunchBytes(b.s, gemvBytes(N, D, y)+int64(N)*4, cuda.Dim3{X: min(b.k.persistBlocks[f], (N+7)/8)}, cuda.Dim3{X: 256}, 0,
			cuda.Ptr(y.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(w.Ptr()), cuda.I32(N), cuda.I32(D))
	}
	return b.gemm(y.Ptr(), false, x.Ptr(), w.Ptr(), T, N, D, true)
}

var _ kernels.MatMulAdder = (*Backend)(nil)
