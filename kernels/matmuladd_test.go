package kernels

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// fakeAdder is a CPU backend whose MatMulAdd records that it ran.
type fakeAdder struct {
	*CPUBackend
	calls int
}

func (f *fakeAdder) MatMulAdd(y, x, w *runtime.Tensor) error {
	f.calls++
	return nil
}

// TestMatMulAdd: the reference leaves y = y + x·wᵀ with the values of MatMul
// and Add, a backend's own op is used where it has one, and bad arguments
// get errors naming what is wrong.
func TestMatMulAdd(t *testing.T) {
	dev := runtime.NewCPU(0)
	b, err := NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	mk := randTensors(t, dev, rng)
	const T, D, N = 3, 40, 24
	for _, wdt := range []runtime.DType{runtime.F32, runtime.BF16} {
		x, w := mk(runtime.F32, T, D), mk(wdt, N, D)
		y, tmp := mk(runtime.F32, T, N), mk(runtime.F32, T, N)
		y0 := append([]float32(nil), y.F32()...)
		if err := MatMulAdd(b, y, x, w, tmp); err != nil {
			t.Fatal(err)
		}
		prod := mk(runtime.F32, T, N)
		if err := b.MatMul(prod, x, w); err != nil {
			t.Fatal(err)
		}
		for i := range y0 {
			if want := y0[i] + prod.F32()[i]; y.F32()[i] != want {
				t.Fatalf("%v weights: y[%d] = %v, want %v + %v = %v", wdt, i, y.F32()[i], y0[i], prod.F32()[i], want)
			}
		}
		if prod.F32()[0] == 0 {
			t.Fatal("a zero product proves nothing")
		}
	}
	x, w := mk(runtime.F32, T, D), mk(runtime.F32, N, D)
	y, tmp := mk(runtime.F32, T, N), mk(runtime.F32, T, N)
	f := &fakeAdder{CPUBackend: b}
	if err := MatMulAdd(f, y, x, w, nil); err != nil || f.calls != 1 {
		t.Fatalf("backend op: err %v, %d calls, want it called once", err, f.calls)
	}
	if err := MatMulAdd(b, y, x, w, nil); err == nil || !strings.Contains(err.Error(), "scratch") {
		t.Errorf("no scratch: error %v", err)
	}
	if err := MatMulAdd(b, mk(runtime.BF16, T, N), x, w, tmp); err == nil || !strings.Contains(err.Error(), "want F32") {
		t.Errorf("bf16 y: error %v", err)
	}
	if err := MatMulAdd(b, y, x, mk(runtime.F32, N, D+1), tmp); err == nil {
		t.Error("mismatched w: no error")
	}
	if err := MatMulAdd(b, nil, x, w, tmp); err == nil || !strings.Contains(err.Error(), "nil") {
		t.Errorf("nil y: error %v", err)
	}
}
