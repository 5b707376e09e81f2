package main

import (
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// openDevice turns a --device value into a device and the kernels that run on it.
func openDevice(name string) (runtime.Device, kernels.Backend, error) {
	switch name {
	case "cpu":
		dev := runtime.NewCPU(0)
		b, err := kernels.NewCPUBackend(dev)
		return dev, b, err
	}
	return nil, nil, usagef("--device %q: unknown device (want cpu)", name)
}
