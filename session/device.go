package session

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/kernels/host"
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
// kernels that run on it: on "cpu" the host kernels (cpuBackend), on
// "cpu:N" the reference CPU kernels, on a GPU the CUDA backend. cpuLimit
// caps the cpu device's memory in bytes (0 = none); it must be 0 for a
// GPU. A build without the cuda tag compiles the same and fails for a GPU
// with an error wrapping cuda.ErrNotBuilt. The caller closes the device,
// which also releases its backend (a GPU's scratch, the host kernels'
// workers).
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
		b, err := cpuBackend(dev, name)
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

// CPUKernelsEnv names the variable that picks the kernels of the "cpu"
// device: "host" or unset for kernels/host's SIMD kernels on a worker pool
// of every core, "reference" for the reference CPU kernels alone.
const CPUKernelsEnv = "FT_CPU_KERNELS"

// cpuBackend is the backend of the cpu device dev named name. The "cpu"
// device runs the hot ops of a forward (the matrix products, SiLU·up,
// attention over contiguous and paged KV caches) in kernels/host's SIMD
// kernels on a pool of every core, and
// every other op in the reference kernels it embeds: the same results as
// the reference within float rounding (sums in another order), 2.6 ×
// faster a decoded token and 13.6 × a 128-token prompt on the llama3-1b
// shape on this project's 2-core machines (bench/RESULTS.md).
// FT_CPU_KERNELS=reference keeps the reference kernels alone. The devices of a sharded model on the CPU
// ("cpu:0", "cpu:1", …) run the reference kernels: they share the
// process's cores, and a pool per device would each claim them all. The
// pool's workers stop when the device closes.
func cpuBackend(dev *runtime.CPUDevice, name string) (kernels.Backend, error) {
	mode := os.Getenv(CPUKernelsEnv)
	switch mode {
	case "", "host", "reference":
	default:
		return nil, fmt.Errorf("%s=%q: want host or reference (or unset: host): %w", CPUKernelsEnv, mode, ErrBadOptions)
	}
	if mode == "reference" || name != "cpu" {
		return kernels.NewCPUBackend(dev)
	}
	hb, err := host.New(dev, host.Options{})
	if err != nil {
		return nil, err
	}
	dev.AtClose(hb.Close)
	return hb, nil
}
