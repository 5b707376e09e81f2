package kernels

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// FP8MatMulAdder is MatMulAdder for FP8 weights: a decoder layer whose
// o_proj and down_proj are FP8 adds their one-token products straight into
// the F32 residual stream (y += x·dequant(w)ᵀ) instead of writing them
// into scratch that a separate add (or add + norm) then reads.
type FP8MatMulAdder interface {
	// MatMulAddFP8 sets y[T,N] += x[T,D]·dequant(w[N,D], scale)ᵀ, y in
	// F32, with F32 accumulation: the values MatMulFP8 into an F32 tensor
	// and then Add(y, y, that) give (one F32 rounding of the product, one
	// of the sum), up to the summation order of the backend's matmul.
	MatMulAddFP8(y, x, w, scale *runtime.Tensor, layout FP8Layout) error
	// AddsFP8 reports whether the decoder should run the residual-adding
	// FP8 projections of rows tokens through MatMulAddFP8 (false: it
	// writes the product and adds it in a separate op, as without the
	// interface).
	AddsFP8(rows int) bool
}

// MatMulAddFP8 sets y += x·dequant(w, scale)ᵀ (y F32; see FP8MatMulAdder)
// on b: in one op where b is an FP8MatMulAdder, else by the reference,
// MatMulFP8 into tmp (an F32 tensor of y's size) and Add.
func MatMulAddFP8(b Backend, y, x, w, scale, tmp *runtime.Tensor, layout FP8Layout) error {
	if y == nil || x == nil || w == nil || scale == nil {
		return fmt.Errorf("kernels.MatMulAddFP8: a nil tensor (y %v, x %v, w %v, scale %v)", y != nil, x != nil, w != nil, scale != nil)
	}
	if y.DType() != runtime.F32 {
		return fmt.Errorf("kernels.MatMulAddFP8: y is %v, want F32", y.DType())
	}
	if f, ok := b.(FP8MatMulAdder); ok {
		return f.MatMulAddFP8(y, x, w, scale, layout)
	}
	if tmp == nil || tmp.DType() != runtime.F32 || tmp.NumElements() != y.NumElements() {
		return fmt.Errorf("kernels.MatMulAddFP8: the reference needs an F32 scratch of y's %d elements (y %v, scratch %v)", y.NumElements(), y.Shape(), tmp)
	}
	if err := MatMulFP8(b, tmp, x, w, scale, layout); err != nil {
		return err
	}
	return b.Add(y, y, tmp)
}

var _ FP8MatMulAdder = (*CPUBackend)(nil)

// MatMulAddFP8 is the CPU reference of FP8MatMulAdder: the product of
// MatMulFP8 in float32 scratch, then added to y element by element (the
// values of MatMulFP8 into F32 and Add).
func (b *CPUBackend) MatMulAddFP8(y, x, w, scale *runtime.Tensor, layout FP8Layout) error {
	if y == nil || x == nil || w == nil || scale == nil {
		return fmt.Errorf("kernels.MatMulAddFP8: a nil tensor (y %v, x %v, w %v, scale %v)", y != nil, x != nil, w != nil, scale != nil)
	}
	qm, err := AsQMat(w, scale, layout)
	if err != nil {
		return err
	}
	xv, err := f32("MatMulAddFP8 x", x)
	if err != nil {
		return err
	}
	yv, err := f32("MatMulAddFP8 y", y)
	if err != nil {
		return err
	}
	if qm.Cols == 0 || x.NumElements()%qm.Cols != 0 {
		return fmt.Errorf("kernels.MatMulAddFP8: x %v does not have rows of w's %d columns (w %v)", x.Shape(), qm.Cols, w.Shape())
	}
	m := x.NumElements() / qm.Cols
	if len(yv) != m*qm.Rows {
		return fmt.Errorf("kernels.MatMulAddFP8: y %v, want %d×%d", y.Shape(), m, qm.Rows)
	}
	if b.FP8Activations {
		xq := make([]float32, len(xv))
		QuantizeRowsF32(xq, xv, qm.Cols)
		xv = xq
	}
	p := getF32(len(yv))
	defer putF32(p)
	prod := (*p)[:len(yv)]
	if err := MatMulQ(prod, xv, m, qm); err != nil {
		return err
	}
	for i, v := range prod {
		yv[i] += v
	}
	return nil
}

// AddsFP8 is false: the CPU decoder keeps the product-then-add path (it
// has no MatMulAdder either), which is the reference; the fused op saves
// memory traffic only on a GPU.
func (b *CPUBackend) AddsFP8(rows int) bool { return false }
