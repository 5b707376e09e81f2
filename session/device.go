package session

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// ErrUnknownDevice is wrapped by OpenDevice and Open when the device name is
// neither "cpu" nor "cuda"/"cuda:N".
var ErrUnknownDevice = errors.New("unknown device (want cpu, cpu:N, cuda:N, a comma-separated list of them or cuda:all)")

// ErrBadOptions is wrapped by Open's errors about its Options (as opposed to
// the checkpoint or the device failing).
var ErrBadOptions = errors.New("bad session options")

// ParseDevice reads one device name: "cpu" and "cpu:N" (one of several CPU
// devices of a sharded model) give cuda false and N; "cuda" (GPU 0) and
// "cuda:N" give cuda true and N. Anything else wraps ErrUnknownDevice.
func ParseDevice(name string) (isCUDA bool, index int, err error) {
	switch name {
	case "cpu":
		return false, 0, nil
	case "cuda":
		return true, 0, nil
	}
	for _, k := range []struct {
		prefix string
		cuda   bool
	}{{"cuda:", true}, {"cpu:", false}} {
		if rest, ok := strings.CutPrefix(name, k.prefix); ok {
			if n, err := strconv.Atoi(rest); err == nil && n >= 0 {
				return k.cuda, n, nil
			}
		}
	}
	return false, 0, fmt.Errorf("device %q: %w", name, ErrUnknownDevice)
}

// OpenDevice opens a device by name ("cpu", "cuda", "cuda:N") with the
// kernels that run on it. cpuLimit caps the cpu device's memory in bytes (0 =
// none); it must be 0 for a GPU. A build without the cuda tag compiles the
// same and fails for a GPU with an error wrapping cuda.ErrNotBuilt. The
// caller closes the device (which also releases a GPU backend).
func OpenDevice(name string, cpuLimit int64) (runtime.Device, kernels.Backend, error) {
	isCUDA, index, err := ParseDevice(name)
	if err != nil {
		return nil, nil, err
	}
	if cpuLimit < 0 {
		return nil, nil, fmt.Errorf("device %s: memory limit %d is negative: %w", name, cpuLimit, ErrBadOptions)
	}
	if !isCUDA {
		dev := runtime.NewCPU(cpuLimit)
		if name != "cpu" {
			dev = runtime.NewCPUNamed(name, cpuLimit)
		}
		b, err := kernels.NewCPUBackend(dev)
		if err != nil {
			dev.Close()
			return nil, nil, err
		}
		return dev, b, nil
	}
	if cpuLimit != 0 {
		return nil, nil, fmt.Errorf("device %s: a memory limit applies to the cpu device only: %w", name, ErrBadOptions)
	}
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
