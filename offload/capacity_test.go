package offload_test

import (
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/llama"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// sizedCPU is a cpu device that reports a physical memory size, as a GPU
// does (cuda.Device.TotalMemory), without a memory limit.
type sizedCPU struct {
	*runtime.CPUDevice
	total int64
}

func (d sizedCPU) TotalMemory() int64 { return d.total }

func TestDeviceCapacity(t *testing.T) {
	limited := runtime.NewCPU(3 << 20)
	defer limited.Close()
	plain := runtime.NewCPU(0)
	defer plain.Close()
	cases := []struct {
		dev  runtime.Device
		want int64
	}{
		{limited, 3 << 20},
		{plain, 0},
		{sizedCPU{plain, 8 << 20}, 8 << 20},
		{sizedCPU{limited, 8 << 20}, 3 << 20}, // a limit wins over the size
	}
	for i, c := range cases {
		if got := offload.DeviceCapacity(c.dev); got != c.want {
			t.Errorf("case %d: capacity %d, want %d", i, got, c.want)
		}
	}
}

// TestFractionOfDeviceSize: --gpu-budget 0.5 on a device without a limit
// but with a known size (a GPU) is half of that size.
func TestFractionOfDeviceSize(t *testing.T) {
	host := runtime.NewCPU(0)
	defer host.Close()
	inner := runtime.NewCPU(0)
	defer inner.Close()
	dev := sizedCPU{inner, 4 << 20}
	m, ck, err := llama.Load(tinyDir, host)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	defer m.Close()
	b, err := kernels.NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	name := uniqueName(t)
	cfg := offload.DefaultConfig(dev)
	cfg.GPUBudget = offload.Budget{Fraction: 0.5}
	if err := offload.Offload(m, &cfg, name); err != nil {
		t.Fatal(err)
	}
	defer offload.Release(name, true)
	run(t, m, b, []int32{1, 2, 3}, 4)
	in, err := offload.GetOffloadManager(name).PlanInput()
	if err != nil {
		t.Fatal(err)
	}
	if in.Budget != 2<<20 {
		t.Fatalf("budget %d bytes, want half of the device's 4 MiB", in.Budget)
	}
}
