package kernels

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// MatMulAddNormer is implemented by backends whose residual-accumulating
// product (MatMulAdder) can also leave the RMSNorm of its result: a decoder
// layer's o_proj or down_proj adds into the F32 residual stream y, and the
// norm that follows it (the layer's post-attention norm, the next layer's
// input norm, the final norm) reads y straight away. On the CUDA backend
// the GEMV's last block computes the norm (kernels/cuda/normtail.cu): one
// launch less per norm.
type MatMulAddNormer interface {
	// MatMulAddNorm sets y[T,N] += x[T,D]·w[N,D]ᵀ, y F32, with the values
	// MatMulAdder.MatMulAdd gives, and then out[T,N] = RMSNorm(y)·nw with
	// eps, the bits the backend's RMSNorm(out, y, nw, eps) writes. It
	// reports whether it ran: false (nothing enqueued, no error) where the
	// backend does not fuse these operands (the CUDA backend: one token, a
	// switch), and the caller then runs MatMulAdd and RMSNorm.
	MatMulAddNorm(y, x, w, out, nw *runtime.Tensor, eps float32) (bool, error)
}

// MatMulAddNorm sets y += x·wᵀ and out = RMSNorm(y)·nw (see
// MatMulAddNormer) on b: in one op where b is a MatMulAddNormer that takes
// the operands, else as MatMulAdd (tmp: the reference's F32 scratch of y's
// size, unused on a MatMulAdder) and RMSNorm.
func MatMulAddNorm(b Backend, y, x, w, tmp, out, nw *runtime.Tensor, eps float32) error {
	if y == nil || x == nil || w == nil || out == nil || nw == nil {
		return fmt.Errorf("kernels.MatMulAddNorm: a nil tensor (y %v, x %v, w %v, out %v, nw %v)", y != nil, x != nil, w != nil, out != nil, nw != nil)
	}
	if f, ok := b.(MatMulAddNormer); ok {
		ran, err := f.MatMulAddNorm(y, x, w, out, nw, eps)
		if err != nil || ran {
			return err
		}
	}
	if err := MatMulAdd(b, y, x, w, tmp); err != nil {
		return err
	}
	return b.RMSNorm(out, y, nw, eps)
}

// MatMulAddNorm is the reference: MatMul into an F32 scratch of y's size,
// Add into y, RMSNorm of y into out (so the values are exactly those of the
// three ops). It always runs.
func (b *CPUBackend) MatMulAddNorm(y, x, w, out, nw *runtime.Tensor, eps float32) (bool, error) {
	if y == nil || x == nil || w == nil || out == nil || nw == nil {
		return false, fmt.Errorf("kernels.MatMulAddNorm: a nil tensor (y %v, x %v, w %v, out %v, nw %v)", y != nil, x != nil, w != nil, out != nil, nw != nil)
	}
	if y.DType() != runtime.F32 {
		return false, fmt.Errorf("kernels.MatMulAddNorm: y is %v, want F32", y.DType())
	}
	if out.NumElements() != y.NumElements() {
		return false, fmt.Errorf("kernels.MatMulAddNorm: out %v, want y's %v elements", out.Shape(), y.Shape())
	}
	tmp, err := runtime.NewTensor(b.Device(), runtime.F32, y.Shape(), "MatMulAddNorm product")
	if err != nil {
		return false, err
	}
	defer tmp.Buffer().Free()
	if err := MatMulAdd(b, y, x, w, tmp); err != nil {
		return false, err
	}
	return true, b.RMSNorm(out, y, nw, eps)
}

var _ MatMulAddNormer = (*CPUBackend)(nil)
