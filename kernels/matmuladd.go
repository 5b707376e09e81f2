package kernels

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// MatMulAdder is implemented by backends that accumulate a product into its
// destination in one op: a decoder layer's o_proj and down_proj write
// straight into the F32 residual stream (y += W·x) instead of into a
// scratch tensor that a separate add (or add + norm) then reads.
type MatMulAdder interface {
	// MatMulAdd sets y[T,N] += x[T,D]·w[N,D]ᵀ, y in F32, with F32
	// accumulation: the values MatMul into an F32 tensor and then
	// Add(y, y, that) give (one F32 rounding of the product, one of the
	// sum), up to the summation order of the backend's GEMM.
	MatMulAdd(y, x, w *runtime.Tensor) error
}

// MatMulAdd sets y += x·wᵀ (y F32; see MatMulAdder) on b: in one op where b
// is a MatMulAdder, else by the reference, MatMul into tmp (an F32 tensor
// of y's size) and Add. The CPU backends take the reference: the fused op
// saves memory traffic only on a GPU.
func MatMulAdd(b Backend, y, x, w, tmp *runtime.Tensor) error {
	if y == nil || x == nil || w == nil {
		return fmt.Errorf("kernels.MatMulAdd: a nil tensor (y %v, x %v, w %v)", y != nil, x != nil, w != nil)
	}
	if y.DType() != runtime.F32 {
		return fmt.Errorf("kernels.MatMulAdd: y is %v, want F32", y.DType())
	}
	if f, ok := b.(MatMulAdder); ok {
		return f.MatMulAdd(y, x, w)
	}
	if tmp == nil || tmp.DType() != runtime.F32 || tmp.NumElements() != y.NumElements() {
		return fmt.Errorf("kernels.MatMulAdd: the reference needs an F32 scratch of y's %d elements (y %v, scratch %v)", y.NumElements(), y.Shape(), tmp)
	}
	if err := b.MatMul(tmp, x, w); err != nil {
		return err
	}
	return b.Add(y, y, tmp)
}
