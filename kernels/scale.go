package kernels

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// Scaler multiplies a tensor in place by a constant: x[i] *= s. The decoder
// scales the rotated queries by the square of a yarn or longrope attention
// factor (transformers scales cos and sin, so q and k, by it).
type Scaler interface {
	// Scale multiplies x by s in place.
	Scale(x *runtime.Tensor, s float32) error
}

// Scale: x[i] *= s for the CPU backend's F32 activations (Scaler).
func (b *CPUBackend) Scale(x *runtime.Tensor, s float32) error {
	xv, err := f32("Scale x", x)
	if err != nil {
		return err
	}
	for i := range xv {
		xv[i] *= s
	}
	return nil
}

// ScaleBy runs b's Scale (Scaler), or says that b has none.
func ScaleBy(b Backend, x *runtime.Tensor, s float32) error {
	f, ok := b.(Scaler)
	if !ok {
		return fmt.Errorf("kernels: backend %T on %s cannot scale a tensor (no Scale; a yarn or longrope attention factor needs it)", b, b.Device().Name())
	}
	return f.Scale(x, s)
}
