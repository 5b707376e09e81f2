package all_test

// Setup shared by the host-placement tests (host*_test.go): the resident
// reference run, the offloaded model's CPU "device", Offload with its
// release, a generation read step by step, trace collection, and the
// logits check against the resident run.

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// residentRun loads the fixture in dir resident on a CPU device and runs
// prompt then steps decode steps on it: the device to load the offloaded
// copies on, the resident model and its logits a step.
func residentRun(t *testing.T, dir string, prompt []int32, steps int) (runtime.Device, *decoder.Model, [][]float32) {
	t.Helper()
	hostDev, cb := cpu(t)
	resident := load(t, dir, hostDev)
	return hostDev, resident, testmodel.Run(t, resident, cb, prompt, steps)
}

// offloadDevice is the offloaded model's "device": a CPU device without a
// limit and the reference kernels on it. The caller closes the device.
func offloadDevice(t *testing.T) (*runtime.CPUDevice, *kernels.CPUBackend) {
	t.Helper()
	dev := runtime.NewCPU(0)
	cb, err := kernels.NewCPUBackend(dev)
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	return dev, cb
}

// offloadAs offloads m under cfg as name and returns its manager and the
// release to defer (a release error fails the test).
func offloadAs(t *testing.T, m *decoder.Model, cfg *offload.Config, name string) (*offload.Manager, func()) {
	t.Helper()
	if err := offload.Offload(m, cfg, name); err != nil {
		t.Fatal(err)
	}
	return offload.GetOffloadManager(name), func() {
		if err := offload.Release(name, true); err != nil {
			t.Error(err)
		}
	}
}

// generate runs prompt then steps one-token decode steps of m on cb in a
// fresh KV cache of their length, picking each token by testmodel.Argmax
// and then calling peek (when not nil) with the step, and returns each
// step's logits.
func generate(t *testing.T, m *decoder.Model, cb kernels.Backend, prompt []int32, steps int, peek func(step int)) [][]float32 {
	t.Helper()
	cache, err := m.NewKVCache(cb, len(prompt)+steps)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Free()
	got, err := testmodel.Steps(m, cb, cache, prompt, steps, func(step int, logits []float32) int32 {
		tok := testmodel.Argmax(step, logits)
		if peek != nil {
			peek(step)
		}
		return tok
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// matchResident fails the test at the first step whose logits differ from
// the resident run's by more than 1e-5.
func matchResident(t *testing.T, got, want [][]float32) {
	t.Helper()
	for i := range want {
		if d := maxDiff(got[i], want[i]); d > 1e-5 {
			t.Fatalf("step %d: logits differ by %g", i, d)
		}
	}
}

// collectTrace sets cfg.Trace to keep every traced step (safe from any
// goroutine) and returns a function giving those kept so far.
func collectTrace(cfg *offload.Config) func() []string {
	var mu sync.Mutex
	var lines []string
	cfg.Trace = func(step string, _ time.Duration) {
		mu.Lock()
		lines = append(lines, step)
		mu.Unlock()
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(lines)
	}
}

// newRatedHost is a ratedHost on a fresh host backend whose GEMV figure
// makes a unit 1 µs a token and whose k-th rated block gets rates[k].
func newRatedHost(t *testing.T, unit int64, rates ...float64) ratedHost {
	calls := 0
	return ratedHost{Backend: hostBackend(t), bw: float64(unit) / 1e-6, rates: rates, mu: &sync.Mutex{}, calls: &calls}
}
