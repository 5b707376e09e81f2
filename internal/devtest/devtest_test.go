package devtest

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// recorder is a testing.TB that records errors and cleanups instead of
// acting on them, so the helpers' failures can be checked.
type recorder struct {
	testing.TB
	errs     []string
	cleanups []func()
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Cleanup(f func())  { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Fatal(args ...any) { r.TB.Fatal(args...) }

func (r *recorder) runCleanups() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

func TestClose(t *testing.T) {
	nan := float32(math.NaN())
	for _, c := range []struct {
		name      string
		got, want []float32
		abs, rel  float64
		ok        bool
		msg       []string // in the error when not ok
	}{
		{"equal", []float32{1, -2, 3}, []float32{1, -2, 3}, 0, 0, true, nil},
		{"within abs", []float32{1.05, -2}, []float32{1, -2}, 0.1, 0, true, nil},
		{"within rel", []float32{105, -2}, []float32{100, -2}, 0, 0.06, true, nil},
		// Binary fractions, so the edge is exact: allowed 0.1875 + 0.03125·10 = 0.5.
		{"abs plus rel", []float32{10.5, 1}, []float32{10, 1}, 0.1875, 0.03125, true, nil},
		{"just past abs plus rel", []float32{1, 10.5625}, []float32{1, 10}, 0.1875, 0.03125, false,
			[]string{"1 of 2", "index 1", "got 10.5625, want 10", "allowed 0.5"}},
		{"worst is the furthest past its allowance", []float32{1.2, 100.5, 3.9}, []float32{1, 100, 3}, 0.1, 0.004,
			false, []string{"2 of 3", "index 2", "got 3.9, want 3", "allowed 0.112"}},
		{"NaN got", []float32{1, nan, 3.5}, []float32{1, 2, 3}, 1, 0, false, []string{"1 of 3", "index 1", "got NaN"}},
		{"NaN beats a finite miss", []float32{9, nan}, []float32{1, 2}, 0, 0, false, []string{"2 of 2", "index 1"}},
		{"Inf got", []float32{float32(math.Inf(1))}, []float32{0}, 1e30, 1, false, []string{"index 0", "got +Inf"}},
		{"length", []float32{1, 2}, []float32{1}, 1, 1, false, []string{"2 values, want 1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &recorder{TB: t}
			if ok := Close(r, c.got, c.want, c.abs, c.rel); ok != c.ok {
				t.Fatalf("Close = %v, want %v (errors %q)", ok, c.ok, r.errs)
			}
			if c.ok {
				if len(r.errs) != 0 {
					t.Fatalf("Close passed but reported %q", r.errs)
				}
				return
			}
			if len(r.errs) != 1 {
				t.Fatalf("Close failed with %d errors %q, want 1", len(r.errs), r.errs)
			}
			for _, m := range c.msg {
				if !strings.Contains(r.errs[0], m) {
					t.Errorf("error %q does not mention %q", r.errs[0], m)
				}
			}
		})
	}
}

func TestMaxAbsDiff(t *testing.T) {
	if d := MaxAbsDiff([]float32{1, 5, -3}, []float32{1.5, 5, -1}); d != 2 {
		t.Errorf("MaxAbsDiff = %v, want 2", d)
	}
	if d := MaxAbsDiff([]float32{1, float32(math.NaN())}, []float32{1, 2}); !math.IsNaN(d) {
		t.Errorf("with a NaN: %v, want NaN", d)
	}
	if d := MaxAbsDiff([]float32{1}, nil); !math.IsInf(d, 1) {
		t.Errorf("lengths 1 and 0: %v, want +Inf", d)
	}
}

// TestNewCPULeak: the CPU device's cleanup reports a buffer the test left on
// it, naming the device.
func TestNewCPULeak(t *testing.T) {
	r := &recorder{TB: t}
	d := NewCPU(r)
	if d.Kind() != runtime.KindCPU || d.Name != "cpu" || d.Backend.Device() != d.Dev || d.Tol != CPUTol {
		t.Fatalf("NewCPU = %+v", d)
	}
	buf, err := d.Dev.Alloc(100, "left behind")
	if err != nil {
		t.Fatal(err)
	}
	r.runCleanups()
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "cpu device") {
		t.Fatalf("cleanup with a buffer left: errors %q, want one about the cpu device", r.errs)
	}
	buf.Free()

	r = &recorder{TB: t}
	d = NewCPU(r)
	buf, _ = d.Dev.Alloc(100, "freed")
	buf.Free()
	r.runCleanups()
	if len(r.errs) != 0 {
		t.Fatalf("cleanup after the test freed everything: %q", r.errs)
	}
}

// TestEach: the body runs on the CPU with a working backend; the GPU subtest
// runs or is skipped with a reason, never silently passes without the body.
func TestEach(t *testing.T) {
	ran := map[string]bool{}
	var cudaSkipped bool
	Each(t, func(t *testing.T, d Device) {
		ran[d.Name] = true
		if !strings.HasSuffix(t.Name(), "/"+d.Name) {
			t.Errorf("subtest %q runs device %q", t.Name(), d.Name)
		}
		x, err := runtime.NewTensor(d.Dev, runtime.F32, []int{2}, "each")
		if err != nil {
			t.Fatal(err)
		}
		defer x.Buffer().Free()
		out := make([]float32, 2)
		if err := d.Backend.ReadF32(out, x); err != nil {
			t.Fatal(err)
		}
	})
	if !ran["cpu"] {
		t.Error("the body did not run on the CPU")
	}
	if _, err := openCUDA(); err != nil {
		cudaSkipped = true
		t.Logf("GPU subtest skipped: %v", err)
	}
	if ran[CUDAName] == cudaSkipped {
		t.Errorf("GPU body ran: %v, GPU available: %v", ran[CUDAName], !cudaSkipped)
	}
}
