package main

import (
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// openDevice turns a --device value into a device and the kernels that run
// on it. cpuLimit is the CPU device's memory limit (0 = none).
func openDevice(name string, cpuLimit int64) (runtime.Device, kernels.Backend, error) {
	switch name {
	case "cpu":
		dev := runtime.NewCPU(cpuLimit)
		b, err := kernels.NewCPUBackend(dev)
		return dev, b, err
	}
	return nil, nil, usagef("--device %q: unknown device (want cpu)", name)
}
