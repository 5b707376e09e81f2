//go:build !cuda

package main

import (
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// openCUDA fails: this binary was built without the cuda tag (cuda.Open
// says so and how to rebuild).
func openCUDA(index int) (runtime.Device, kernels.Backend, error) {
	_, err := cuda.Open(index)
	return nil, nil, err
}
