package main

import (
	"strconv"
	"strings"

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
	if index, ok := parseCUDA(name); ok {
		if cpuLimit != 0 {
			return nil, nil, usagef("--device-memory applies to --device cpu only")
		}
		return openCUDA(index)
	}
	return nil, nil, usagef("--device %q: unknown device (want cpu or cuda:N)", name)
}

// parseCUDA reads "cuda" (GPU 0) or "cuda:N".
func parseCUDA(name string) (int, bool) {
	if name == "cuda" {
		return 0, true
	}
	rest, ok := strings.CutPrefix(name, "cuda:")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}
