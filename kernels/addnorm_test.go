package kernels

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestAddRMSNorm: the fused op leaves x and out exactly as Add then RMSNorm
// do, and names a shape mismatch.
func TestAddRMSNorm(t *testing.T) {
	dev := runtime.NewCPU(0)
	b, err := NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const T, D = 3, 64
	mk := func(n int, shape ...int) (*runtime.Tensor, []float32) {
		x, err := runtime.NewTensor(dev, runtime.F32, shape, "test")
		if err != nil {
			t.Fatal(err)
		}
		for i := range x.F32() {
			x.F32()[i] = rng.Float32()*2 - 1
		}
		return x, append([]float32(nil), x.F32()...)
	}
	x, xv := mk(T*D, T, D)
	y, _ := mk(T*D, T, D)
	w, _ := mk(D, D)
	x2, _ := mk(T*D, T, D)
	copy(x2.F32(), xv)
	out, _ := mk(T*D, T, D)
	out2, _ := mk(T*D, T, D)
	if err := b.AddRMSNorm(out, x, y, w, 1e-5); err != nil {
		t.Fatal(err)
	}
	if err := b.Add(x2, x2, y); err != nil {
		t.Fatal(err)
	}
	if err := b.RMSNorm(out2, x2, w, 1e-5); err != nil {
		t.Fatal(err)
	}
	for i := range xv {
		if x.F32()[i] != x2.F32()[i] || out.F32()[i] != out2.F32()[i] {
			t.Fatalf("element %d: x %v out %v, want x %v out %v", i, x.F32()[i], out.F32()[i], x2.F32()[i], out2.F32()[i])
		}
		if x.F32()[i] == xv[i] && y.F32()[i] != 0 {
			t.Fatalf("element %d: x was not updated", i)
		}
	}
	short, _ := mk(D, 1, D)
	if err := b.AddRMSNorm(out, x, short, w, 1e-5); err == nil || !strings.Contains(err.Error(), "disagree") {
		t.Errorf("mismatched y: error %v", err)
	}
}
