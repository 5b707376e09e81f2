//go:build cuda

package devtest

import (
	"fmt"
	"sync"

	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

var (
	cudaOnce sync.Once
	cudaDev  Device
	cudaErr  error
)

// openCUDA opens GPU 0 and its kernels the first time it is called and
// returns the same Device (or error) after that. The device stays open for
// the life of the process.
func openCUDA() (Device, error) {
	cudaOnce.Do(func() {
		dev, err := cuda.Open(0)
		if err != nil {
			cudaErr = fmt.Errorf("no GPU: %w", err)
			return
		}
		b, err := cudabackend.New(dev)
		if err != nil {
			dev.Close()
			cudaErr = fmt.Errorf("%s: the CUDA kernels: %w", dev.Name(), err)
			return
		}
		cudaDev = Device{Name: dev.Name(), Dev: dev, Backend: b, Tol: CUDATol}
	})
	return cudaDev, cudaErr
}
