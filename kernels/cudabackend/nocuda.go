//go:build !cuda

package cudabackend

import (
	"fmt"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// Backend is the GPU backend; in builds without the cuda tag New never makes
// one. It embeds kernels.Backend only so that programs written against the
// CUDA build (passing a *Backend where a kernels.Backend is wanted) compile
// without the tag too.
type Backend struct{ kernels.Backend }

// New fails: this binary was built without the cuda tag. The error wraps
// cuda.ErrNotBuilt and says how to rebuild.
func New(dev runtime.Device) (*Backend, error) {
	name := "cuda"
	if dev != nil {
		name = dev.Name()
	}
	return nil, fmt.Errorf("cudabackend: %s: %w", name, cuda.ErrNotBuilt)
}
