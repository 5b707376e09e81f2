package kernels

import (
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestCPUBackendNilInput: NewCPUBackend(nil) and every Backend op of the CPU
// backend with a nil tensor give an error naming the argument, not a panic.
func TestCPUBackendNilInput(t *testing.T) {
	if _, err := NewCPUBackend(nil); err == nil || !strings.Contains(err.Error(), "nil device") {
		t.Errorf("NewCPUBackend(nil): %v", err)
	}
	dev := runtime.NewCPU(0)
	b, err := NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	x, err := runtime.NewTensor(dev, runtime.F32, runtime.Shape{2, 4}, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer x.Buffer().Free()
	w, err := runtime.NewTensor(dev, runtime.F32, runtime.Shape{4, 4}, "w")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Buffer().Free()
	kv, err := runtime.NewTensor(dev, runtime.F32, runtime.Shape{8, 1, 4}, "kv")
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Buffer().Free()
	q, err := x.Reshape(2, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		op   string
		run  func() error
		want string
	}{
		{"MatMul nil out", func() error { return b.MatMul(nil, x, w) }, "MatMul out is nil"},
		{"MatMul nil x", func() error { return b.MatMul(x, nil, w) }, "MatMul x is nil"},
		{"MatMul nil w", func() error { return b.MatMul(x, x, nil) }, "weight is nil"},
		{"RMSNorm nil w", func() error { return b.RMSNorm(x, x, nil, 1e-6) }, "weight is nil"},
		{"RMSNorm nil x", func() error { return b.RMSNorm(x, nil, w, 1e-6) }, "RMSNorm x is nil"},
		{"Embedding nil table", func() error { return b.Embedding(x, nil, []int32{0, 1}) }, "weight is nil"},
		{"Embedding nil out", func() error { return b.Embedding(nil, w, []int32{0, 1}) }, "Embedding out is nil"},
		{"RoPE nil x", func() error { return b.RoPE(nil, 0, []float32{1, 1}) }, "RoPE x is nil"},
		{"StoreKV nil cache", func() error { return b.StoreKV(nil, q, 0) }, "StoreKV cache is nil"},
		{"Attention nil q", func() error { return b.Attention(q, nil, kv, kv, 0) }, "Attention q is nil"},
		{"SiLUMul nil up", func() error { return b.SiLUMul(x, x, nil) }, "SiLUMul up is nil"},
		{"Add nil out", func() error { return b.Add(nil, x, x) }, "Add out is nil"},
		{"Add nil b", func() error { return b.Add(x, x, nil) }, "Add b is nil"},
		{"ReadF32 nil src", func() error { return b.ReadF32(make([]float32, 8), nil) }, "src is nil"},
	} {
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: panicked: %v", c.op, r)
				}
			}()
			return c.run()
		}()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.op, err, c.want)
		}
	}
}
