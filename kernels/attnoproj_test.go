package kernels

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// aoFake is a CPU backend whose AttnOProj records its calls and either
// declines or "runs" by adding 1 to every y value (so a test can tell that
// the helper took the backend's op and ran nothing else).
type aoFake struct {
	*CPUBackend
	run   bool
	calls int
}

func (f *aoFake) AttnOProj(y, q, kCache, vCache, wo *runtime.Tensor, pos0 int) (bool, error) {
	f.calls++
	if !f.run {
		return false, nil
	}
	for i := range y.F32() {
		y.F32()[i]++
	}
	return true, nil
}

// TestAttnOProjFallback: kernels.AttnOProj on a backend without the fused
// op, or one that declines, leaves y += Attention·woᵀ with exactly the
// values of Attention then MatMulAdd (the reference the GPU tests compare
// with) and reports that the fused op did not run; a backend that runs it
// is asked once and nothing else runs; nil tensors are errors.
func TestAttnOProjFallback(t *testing.T) {
	dev := runtime.NewCPU(0)
	b, err := NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(21, 4))
	mk := func(dt runtime.DType, shape ...int) *runtime.Tensor {
		x, err := runtime.NewTensor(dev, dt, shape, "test")
		if err != nil {
			t.Fatal(err)
		}
		if dt == runtime.F32 {
			for i := range x.F32() {
				x.F32()[i] = rng.Float32()*2 - 1
			}
		} else {
			bs := x.Bytes()
			for i := 0; i+1 < len(bs); i += 2 {
				v := runtime.F32ToBF16(rng.Float32()*2 - 1)
				bs[i], bs[i+1] = byte(v), byte(v>>8)
			}
		}
		return x
	}
	clone := func(x *runtime.Tensor) *runtime.Tensor {
		c := mk(x.DType(), x.Shape()...)
		copy(c.Bytes(), x.Bytes())
		return c
	}
	const H, K, d, C, N = 4, 2, 16, 9, 24
	act := b.ActDType()
	for _, pos := range []int{0, 5, C - 1} {
		q, kc, vc := mk(act, 1, H, d), mk(act, C, K, d), mk(act, C, K, d)
		wo, y0 := mk(runtime.BF16, N, H*d), mk(runtime.F32, 1, N)

		// The two ops.
		att := mk(act, 1, H, d)
		if err := b.Attention(att, q, kc, vc, pos); err != nil {
			t.Fatal(err)
		}
		flat, err := att.Reshape(1, H*d)
		if err != nil {
			t.Fatal(err)
		}
		want := clone(y0)
		if err := MatMulAdd(b, want, flat, wo, mk(runtime.F32, 1, N)); err != nil {
			t.Fatal(err)
		}
		if slices.Equal(want.F32(), y0.F32()) {
			t.Fatal("a zero product proves nothing")
		}

		y := clone(y0)
		ran, err := AttnOProj(b, y, mk(act, 1, H, d), q, kc, vc, wo, mk(runtime.F32, 1, N), pos)
		if err != nil || ran {
			t.Fatalf("pos %d, CPU backend: ran %v, %v; want the two ops", pos, ran, err)
		}
		if !slices.Equal(y.F32(), want.F32()) {
			t.Errorf("pos %d, CPU backend: y differs from Attention then MatMulAdd", pos)
		}

		f := &aoFake{CPUBackend: b}
		y = clone(y0)
		ran, err = AttnOProj(f, y, mk(act, 1, H, d), q, kc, vc, wo, mk(runtime.F32, 1, N), pos)
		if err != nil || ran || f.calls != 1 {
			t.Fatalf("pos %d, declining backend: ran %v, err %v, %d calls; want asked once, then the two ops", pos, ran, err, f.calls)
		}
		if !slices.Equal(y.F32(), want.F32()) {
			t.Errorf("pos %d, declining backend: y differs from Attention then MatMulAdd", pos)
		}

		r := &aoFake{CPUBackend: b, run: true}
		y = clone(y0)
		att2 := mk(act, 1, H, d)
		before := clone(att2)
		ran, err = AttnOProj(r, y, att2, q, kc, vc, wo, nil, pos)
		if err != nil || !ran || r.calls != 1 {
			t.Fatalf("pos %d, fusing backend: ran %v, err %v, %d calls; want its op once", pos, ran, err, r.calls)
		}
		for i, v := range y.F32() {
			if v != y0.F32()[i]+1 {
				t.Fatalf("pos %d, fusing backend: y[%d] = %v, want only the backend's op (%v)", pos, i, v, y0.F32()[i]+1)
			}
		}
		if !slices.Equal(att2.Bytes(), before.Bytes()) {
			t.Errorf("pos %d, fusing backend: the attention output was written", pos)
		}
	}
	q, kc := mk(act, 1, H, d), mk(act, C, K, d)
	if _, err := AttnOProj(b, mk(runtime.F32, 1, N), mk(act, 1, H, d), q, kc, nil, mk(runtime.BF16, N, H*d), nil, 0); err == nil ||
		!strings.Contains(err.Error(), "nil") {
		t.Errorf("nil v cache: error %v", err)
	}
}
