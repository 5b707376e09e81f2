//go:build !cuda

package cudabackend

import (
	"errors"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// The stub's *Backend is a kernels.Backend, as the CUDA one is.
var _ kernels.Backend = (*Backend)(nil)

func TestNewWithoutCUDA(t *testing.T) {
	cpu := runtime.NewCPU(0)
	defer cpu.Close()
	b, err := New(cpu)
	if b != nil || !errors.Is(err, cuda.ErrNotBuilt) {
		t.Fatalf("New = %v, %v; want nil and ErrNotBuilt", b, err)
	}
	if !strings.Contains(err.Error(), "make build-cuda") {
		t.Errorf("error %q does not say how to rebuild", err)
	}
	if _, err := New(nil); !errors.Is(err, cuda.ErrNotBuilt) {
		t.Errorf("New(nil) = %v, want ErrNotBuilt", err)
	}
}
