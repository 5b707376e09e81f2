//go:build cuda

package main

import (
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// openCUDA opens GPU index and the CUDA kernels (compiled with NVRTC here).
func openCUDA(index int) (runtime.Device, kernels.Backend, error) {
	dev, err := cuda.Open(index)
	if err != nil {
		return nil, nil, err
	}
	b, err := cudabackend.New(dev)
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	return dev, b, nil
}
