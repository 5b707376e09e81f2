package kernels

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// tailFake is a CPU backend with a MatMulAddNorm that records its calls and
// always declines (ran false).
type tailFake struct {
	*CPUBackend
	calls int
}

func (f *tailFake) MatMulAddNorm(y, x, w, out, nw *runtime.Tensor, eps float32) (bool, error) {
	f.calls++
	return false, nil
}

// tailRunner is a CPU backend whose MatMulAddNorm runs (the reference).
type tailRunner struct {
	*CPUBackend
	calls int
}

func (f *tailRunner) MatMulAddNorm(y, x, w, out, nw *runtime.Tensor, eps float32) (bool, error) {
	f.calls++
	return f.CPUBackend.MatMulAddNorm(y, x, w, out, nw, eps)
}

// TestMatMulAddNorm: the CPU reference and the kernels.MatMulAddNorm
// helper leave y = y + x·wᵀ and out = RMSNorm(y)·nw with exactly the values
// of MatMul, Add and RMSNorm, for one token and several; the helper runs a
// backend's own op where it has one, the composition where it declines,
// and bad arguments get errors naming what is wrong.
func TestMatMulAddNorm(t *testing.T) {
	dev := runtime.NewCPU(0)
	b, err := NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	mk := randTensors(t, dev, rng)
	clone := func(x *runtime.Tensor) *runtime.Tensor {
		c := mk(x.DType(), x.Shape()...)
		copy(c.Bytes(), x.Bytes())
		return c
	}
	const D, N, eps = 40, 24, 1e-5
	for _, T := range []int{1, 3} {
		x, w, nw := mk(runtime.F32, T, D), mk(runtime.BF16, N, D), mk(runtime.BF16, N)
		y0 := mk(runtime.F32, T, N)

		// The three ops.
		wantY, wantOut, prod := clone(y0), mk(runtime.F32, T, N), mk(runtime.F32, T, N)
		if err := b.MatMul(prod, x, w); err != nil {
			t.Fatal(err)
		}
		if err := b.Add(wantY, wantY, prod); err != nil {
			t.Fatal(err)
		}
		if err := b.RMSNorm(wantOut, wantY, nw, eps); err != nil {
			t.Fatal(err)
		}
		if slices.Equal(wantY.F32(), y0.F32()) || wantOut.F32()[0] == 0 {
			t.Fatal("a zero product or norm proves nothing")
		}

		check := func(name string, y, out *runtime.Tensor) {
			t.Helper()
			if !slices.Equal(y.F32(), wantY.F32()) {
				t.Errorf("T=%d %s: y differs from MatMul then Add", T, name)
			}
			if !slices.Equal(out.F32(), wantOut.F32()) {
				t.Errorf("T=%d %s: out differs from RMSNorm of y", T, name)
			}
		}
		y, out := clone(y0), mk(runtime.F32, T, N)
		if ran, err := b.MatMulAddNorm(y, x, w, out, nw, eps); err != nil || !ran {
			t.Fatalf("T=%d reference: ran %v, %v", T, ran, err)
		}
		check("reference", y, out)

		y, out = clone(y0), mk(runtime.F32, T, N)
		if err := MatMulAddNorm(b, y, x, w, nil, out, nw, eps); err != nil {
			t.Fatal(err)
		}
		check("helper on the CPU backend", y, out)

		r := &tailRunner{CPUBackend: b}
		y, out = clone(y0), mk(runtime.F32, T, N)
		if err := MatMulAddNorm(r, y, x, w, nil, out, nw, eps); err != nil || r.calls != 1 {
			t.Fatalf("backend op: err %v, %d calls, want it called once", err, r.calls)
		}
		check("helper on a backend's op", y, out)

		f := &tailFake{CPUBackend: b}
		y, out = clone(y0), mk(runtime.F32, T, N)
		if err := MatMulAddNorm(f, y, x, w, mk(runtime.F32, T, N), out, nw, eps); err != nil || f.calls != 1 {
			t.Fatalf("declining backend: err %v, %d calls, want it asked once", err, f.calls)
		}
		check("helper after a decline", y, out)
	}

	x, w, nw := mk(runtime.F32, 1, D), mk(runtime.BF16, N, D), mk(runtime.BF16, N)
	y, out := mk(runtime.F32, 1, N), mk(runtime.F32, 1, N)
	if err := MatMulAddNorm(b, y, x, w, nil, nil, nw, eps); err == nil || !strings.Contains(err.Error(), "nil") {
		t.Errorf("nil out: error %v", err)
	}
	if _, err := b.MatMulAddNorm(mk(runtime.BF16, 1, N), x, w, out, nw, eps); err == nil || !strings.Contains(err.Error(), "want F32") {
		t.Errorf("BF16 y: error %v", err)
	}
	if _, err := b.MatMulAddNorm(y, x, w, mk(runtime.F32, 2, N), nw, eps); err == nil || !strings.Contains(err.Error(), "elements") {
		t.Errorf("out of another size: error %v", err)
	}
	if _, err := b.MatMulAddNorm(y, x, w, out, mk(runtime.BF16, N+1), eps); err == nil {
		t.Error("a norm weight of another width: no error")
	}
	f := &tailFake{CPUBackend: b}
	if err := MatMulAddNorm(f, y, x, w, nil, out, nw, eps); err == nil || !strings.Contains(err.Error(), "scratch") {
		t.Errorf("declined without scratch: error %v", err)
	}
}
