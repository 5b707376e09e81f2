package kernels

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestNormRoPEStoreKVRef: the CPU op normalises every q and k head by its
// RMS over d with its own weight, rotates the pairs (i, i+d/2) by
// (pos0+t)·inv[i], writes q and k in place and k and v into cache rows
// pos0.., leaving the other rows alone; values from a float64 model of the
// formulas. Bad operands are errors naming what is wrong.
func TestNormRoPEStoreKVRef(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	b, err := NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	mk := randTensors(t, dev, rng)
	const T, H, KV, d, C, pos0 = 3, 4, 2, 8, 10, 5
	const eps = 1e-6
	inv, err := RopeInvFreq(d, 10000, RopeScaling{})
	if err != nil {
		t.Fatal(err)
	}
	a := QKNormRoPE{Q: mk(runtime.F32, T, H, d), K: mk(runtime.F32, T, KV, d), V: mk(runtime.F32, T, KV, d),
		QNorm: mk(runtime.F32, d), KNorm: mk(runtime.F32, d), Eps: eps,
		KCache: mk(runtime.F32, C, KV, d), VCache: mk(runtime.F32, C, KV, d), Pos: pos0, InvFreq: inv}
	clone := func(x *runtime.Tensor) []float32 { return append([]float32(nil), x.F32()...) }
	q0, k0, v0, kc0, vc0 := clone(a.Q), clone(a.K), clone(a.V), clone(a.KCache), clone(a.VCache)
	// model returns the normalised, rotated heads of x (n heads a token).
	model := func(x []float32, n int, w []float32) []float64 {
		out := make([]float64, len(x))
		for r := 0; r < len(x)/d; r++ {
			h := x[r*d : (r+1)*d]
			s := 0.0
			for _, v := range h {
				s += float64(v) * float64(v)
			}
			scale := 1 / math.Sqrt(s/d+eps)
			y := make([]float64, d)
			for i := range y {
				y[i] = float64(h[i]) * scale * float64(w[i])
			}
			p := float64(pos0 + r/n)
			for i := 0; i < d/2; i++ {
				sin, cos := math.Sincos(p * float64(inv[i]))
				out[r*d+i] = y[i]*cos - y[i+d/2]*sin
				out[r*d+i+d/2] = y[i+d/2]*cos + y[i]*sin
			}
		}
		return out
	}
	wantQ, wantK := model(q0, H, a.QNorm.F32()), model(k0, KV, a.KNorm.F32())
	ran, err := b.NormRoPEStoreKV(a)
	if err != nil || !ran {
		t.Fatalf("ran %v, %v", ran, err)
	}
	checkClose(t, "q", a.Q.F32(), wantQ, 1e-5, 1e-5)
	checkClose(t, "k", a.K.F32(), wantK, 1e-5, 1e-5)
	row := KV * d
	wantKC, wantVC := make([]float64, len(kc0)), make([]float64, len(vc0))
	for i := range kc0 {
		wantKC[i], wantVC[i] = float64(kc0[i]), float64(vc0[i])
	}
	for i := 0; i < T*row; i++ {
		wantKC[pos0*row+i], wantVC[pos0*row+i] = wantK[i], float64(v0[i])
	}
	checkClose(t, "k cache", a.KCache.F32(), wantKC, 1e-5, 1e-5)
	checkClose(t, "v cache", a.VCache.F32(), wantVC, 0, 0)

	for _, c := range []struct {
		what string
		edit func(*QKNormRoPE)
		want string
	}{
		{"nil q norm", func(a *QKNormRoPE) { a.QNorm = nil }, "q norm weight is nil"},
		{"short k norm", func(a *QKNormRoPE) { a.KNorm = mk(runtime.F32, d-2) }, "want 8 values each"},
		{"k of other tokens", func(a *QKNormRoPE) { a.K = mk(runtime.F32, T+1, KV, d) }, "want [T,H,d]"},
		{"frequencies", func(a *QKNormRoPE) { a.InvFreq = inv[:1] }, "d/2 = 4 frequencies"},
		{"past the cache", func(a *QKNormRoPE) { a.Pos = C - T + 1 }, "3 tokens at position 8 exceed the cache's 10 rows"},
		{"negative position", func(a *QKNormRoPE) { a.Pos = -1 }, "position -1"},
	} {
		bad := a
		c.edit(&bad)
		if _, err := b.NormRoPEStoreKV(bad); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.what, err, c.want)
		}
	}
}
