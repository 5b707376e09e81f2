// Package devtest runs one test body on every device this test binary can
// use, and compares float32 results with a tolerance abs + rel·|want|.
//
//	func TestX(t *testing.T) {
//		devtest.Each(t, func(t *testing.T, d devtest.Device) {
//			... d.Dev, d.Backend, d.Tol ...
//		})
//	}
//
// Each runs a subtest per device: "cpu" always, and "cuda:0", which runs
// when the binary is built with the cuda tag and GPU 0 opens, and is skipped
// otherwise with the reason ("built without the cuda tag …" or "no GPU: …").
//
// Device lifetimes: the CPU device is made fresh for each subtest and closed
// at its end (CPU devices cost nothing, and the close reports any buffer the
// test left allocated as a test error). The GPU is opened once per test
// binary, on first use (opening compiles the CUDA kernels, about a second),
// and stays open for the life of the process: its memory goes back to the
// driver when the process exits. Tests that check a GPU's byte accounting
// therefore take their own baseline (Dev.Memory()) instead of assuming zero.
//
// Subtests of one Device must not run in parallel: a backend keeps scratch
// buffers and is not safe for concurrent use.
//
// The package is for tests only (other packages' _test files import it).
package devtest

import (
	"math"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// Tol is a tolerance: got is close to want when |got − want| ≤ Abs + Rel·|want|.
type Tol struct {
	Abs, Rel float64
}

// Allowed is the largest |got − want| the tolerance accepts for want.
func (tol Tol) Allowed(want float64) float64 { return tol.Abs + tol.Rel*math.Abs(want) }

// Device is one device under test and the kernels that run on it.
type Device struct {
	// Name is the device's name and the subtest's: "cpu", "cuda:0".
	Name string
	// Dev is the device; Backend runs the kernels on its tensors.
	Dev     runtime.Device
	Backend kernels.Backend
	// Tol bounds the difference between two sets of float32 logits this
	// device computes for the same tokens by different routes (one full
	// forward against a prefill then one-token steps): summation order only
	// on the CPU (float32 activations), bf16 rounding of the activations on
	// a GPU.
	Tol Tol
}

// Kind is the device's kind (runtime.KindCPU, runtime.KindCUDA).
func (d Device) Kind() runtime.DeviceKind { return d.Dev.Kind() }

// CPUTol and CUDATol are the Device.Tol of each kind.
var (
	CPUTol  = Tol{Abs: 1e-4}
	CUDATol = Tol{Abs: 5e-2}
)

// CUDAName is the name of the GPU subtest.
const CUDAName = "cuda:0"

// Each runs body as a subtest on each device: the CPU, then GPU 0 when this
// binary is built with the cuda tag and the GPU opens (otherwise that
// subtest is skipped, saying why).
func Each(t *testing.T, body func(t *testing.T, d Device)) {
	t.Helper()
	t.Run("cpu", func(t *testing.T) {
		body(t, NewCPU(t))
	})
	t.Run(CUDAName, func(t *testing.T) {
		d, err := openCUDA()
		if err != nil {
			t.Skip(err.Error())
		}
		body(t, d)
	})
}

// NewCPU returns a fresh CPU device (no memory limit) with the CPU kernels;
// a cleanup closes it and fails t if the test left buffers on it.
func NewCPU(t testing.TB) Device {
	t.Helper()
	dev := runtime.NewCPU(0)
	b, err := kernels.NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dev.Close(); err != nil {
			t.Errorf("cpu device: %v", err)
		}
	})
	return Device{Name: dev.Name(), Dev: dev, Backend: b, Tol: CPUTol}
}

// Close reports whether every got[i] is within abs + rel·|want[i]| of
// want[i]. If not, it fails t with the number of elements out of tolerance
// and the worst of them (the one furthest past its allowance): its index,
// both values and the difference allowed there. NaN or ±Inf in got where
// want is finite is always out of tolerance; so is a length mismatch.
func Close(t testing.TB, got, want []float32, abs, rel float64) bool {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("devtest.Close: %d values, want %d", len(got), len(want))
		return false
	}
	tol := Tol{abs, rel}
	bad, worst, excess := 0, -1, math.Inf(-1)
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if g == w {
			continue
		}
		d := math.Abs(g - w)
		allowed := tol.Allowed(w)
		if d <= allowed {
			continue
		}
		// NaN differences compare false above: they are out of tolerance
		// and count as the worst.
		e := d - allowed
		if math.IsNaN(d) {
			e = math.Inf(1)
		}
		bad++
		if worst < 0 || e > excess {
			worst, excess = i, e
		}
	}
	if bad == 0 {
		return true
	}
	g, w := float64(got[worst]), float64(want[worst])
	t.Errorf("%d of %d values out of tolerance (abs %g + rel %g·|want|); worst at index %d: got %v, want %v, |diff| %.3g > allowed %.3g",
		bad, len(got), abs, rel, worst, got[worst], want[worst], math.Abs(g-w), tol.Allowed(w))
	return false
}

// MaxAbsDiff is max |got[i] − want[i]|, for logging how close two results
// are: NaN if any difference is NaN, +Inf if the lengths differ.
func MaxAbsDiff(got, want []float32) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	m := 0.0
	for i := range got {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if math.IsNaN(d) {
			return d
		}
		m = max(m, d)
	}
	return m
}
