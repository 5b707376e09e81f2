package kernels

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// AddRMSNormer is implemented by backends that fuse a residual add with the
// RMSNorm that reads its result (a decoder layer's x += attn; h = norm(x)):
// one pass over x instead of two ops.
type AddRMSNormer interface {
	// AddRMSNorm sets x += y (in place, elementwise) and then out[t,:] =
	// x[t,:] / sqrt(mean(x[t,:]²) + eps) · w, with the values Add and
	// RMSNorm would give.
	AddRMSNorm(out, x, y, w *runtime.Tensor, eps float32) error
}

// AddRMSNorm is the reference: Add, then RMSNorm.
func (b *CPUBackend) AddRMSNorm(out, x, y, w *runtime.Tensor, eps float32) error {
	if x == nil || y == nil || out == nil || w == nil {
		return fmt.Errorf("kernels.AddRMSNorm: a nil tensor (out %v, x %v, y %v, w %v)", out != nil, x != nil, y != nil, w != nil)
	}
	if x.NumElements() != y.NumElements() || x.NumElements() != out.NumElements() || x.Dim(-1) != w.NumElements() {
		return fmt.Errorf("kernels.AddRMSNorm: x %v, y %v, out %v, w %v disagree", x.Shape(), y.Shape(), out.Shape(), w.Shape())
	}
	if err := b.Add(x, x, y); err != nil {
		return err
	}
	return b.RMSNorm(out, x, w, eps)
}

var _ AddRMSNormer = (*CPUBackend)(nil)
