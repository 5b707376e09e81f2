//go:build cuda

package cudabackend

import (
	"fmt"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

var _ kernels.FP8MatMulAdder = (*Backend)(nil)

// fp8OutMode is the out_f32 argument of the FP8 GEMV kernels: 0 bf16 out,
// 1 fp32 out, 2 fp32 out added to (add).
func fp8OutMode(out *runtime.Tensor, add bool) int {
	switch {
	case add:
		return 2
	case out.DType() == runtime.F32:
		return 1
	}
	return 0
}

// AddsFP8 is kernels.FP8MatMulAdder's choice: one token, unless
// b.NoFP8Add (FT_FP8_ADD=0). Several tokens keep the product-then-add
// path (MatMulAddFP8 would dequantize to BF16 for cuBLAS there, where
// MatMulFP8 may take the FP8 tensor cores).
func (b *Backend) AddsFP8(rows int) bool { return rows == 1 && !b.NoFP8Add }

// MatMulAddFP8 is kernels.FP8MatMulAdder on the GPU: y[T,N] +=
// x[T,D]·dequant(w, scale)ᵀ, y F32 (the residual stream), x BF16, w
// F8_E4M3 with scales per channel or per block. One token runs the kernel
// MatMulFP8 runs (gemv_fp8_v in the variant b.FP8Variant picks for its
// width, fp8VariantFor, or fp8.cu's
// gemv_fp8) in its adding mode: each row's fp32
// sum is added to y, bit for bit what MatMulFP8 into F32 and Add give.
// Otherwise (several tokens, or a shape those kernels do not take) the
// weight is dequantized to BF16 and a GEMM adds into y (beta 1).
func (b *Backend) MatMulAddFP8(y, x, w, scale *runtime.Tensor, layout kernels.FP8Layout) error {
	if y == nil || x == nil || w == nil || scale == nil {
		return fmt.Errorf("cudabackend.MatMulAddFP8: a nil tensor (y %v, x %v, w %v, scale %v)", y != nil, x != nil, w != nil, scale != nil)
	}
	if err := b.checkFP8Weight("MatMulAddFP8", w, scale, layout); err != nil {
		return err
	}
	if err := b.act("MatMulAddFP8", "x", x); err != nil {
		return err
	}
	if err := b.onDevice("MatMulAddFP8", "y", y); err != nil {
		return err
	}
	if y.DType() != runtime.F32 {
		return fmt.Errorf("cudabackend.MatMulAddFP8: y is %v, want F32", y.DType())
	}
	N, D := w.Dim(0), w.Dim(1)
	if D == 0 || x.NumElements()%D != 0 {
		return fmt.Errorf("cudabackend.MatMulAddFP8: x %v does not have rows of w's %d columns (w %v)", x.Shape(), D, w.Shape())
	}
	T := x.NumElements() / D
	if y.NumElements() != T*N {
		return fmt.Errorf("cudabackend.MatMulAddFP8: y %v, want %d×%d", y.Shape(), T, N)
	}
	if T == 0 || N == 0 {
		return nil
	}
	blk := layout.Block
	if T == 1 {
		if handled, err := b.gemvFP8V(y, x, w, scale, layout, true); handled || err != nil {
			return err
		}
		if D%16 == 0 && blk%16 == 0 && aligned16(x.Ptr(), w.Ptr()) {
			f := b.k.gemvFP8
			bytes := int64(N)*int64(D) + scale.NumBytes() + int64(D)*2 + int64(N)*8
			return f.LaunchBytes(b.s, bytes, cuda.Dim3{X: min(b.k.persistBlocks[f], (N+7)/8)}, cuda.Dim3{X: 256}, 0,
				cuda.Ptr(y.Ptr()), cuda.I32(2), cuda.Ptr(x.Ptr()), cuda.Ptr(w.Ptr()), cuda.Ptr(scale.Ptr()), cuda.I32(int(scale.DType())),
				cuda.I32(N), cuda.I32(D), cuda.I32(blk), cuda.I32(fp8Stride(D, layout)))
		}
	}
	return b.matMulFP8DequantAdd(y, x, w, scale, layout, T, N, D, true)
}
