package kernels

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// cpuT makes a CPU tensor of dtype dt and shape holding vals (F32 or I32).
func cpuT(t *testing.T, dev runtime.Device, dt runtime.DType, vals any, shape ...int) *runtime.Tensor {
	t.Helper()
	x, err := runtime.NewTensor(dev, dt, shape, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Buffer().Free)
	switch v := vals.(type) {
	case []float32:
		copy(x.F32(), v)
	case []int32:
		copy(x.I32(), v)
	}
	return x
}

// TestMoERouteCPU: MoERoute writes Routing.Route's experts and weights,
// renormalised or not, with ties and a row of NaN.
func TestMoERouteCPU(t *testing.T) {
	dev := runtime.NewCPU(0)
	b, _ := NewCPUBackend(dev)
	rng := rand.New(rand.NewPCG(1, 2))
	const T, E, K = 5, 12, 3
	logits := make([]float32, T*E)
	for i := range logits {
		logits[i] = float32(rng.IntN(5)) // many ties
	}
	logits[3*E+4] = float32(math.NaN())
	for _, renorm := range []bool{false, true} {
		ids, wts := cpuT(t, dev, runtime.I32, nil, T, K), cpuT(t, dev, runtime.F32, nil, T, K)
		if err := b.MoERoute(ids, wts, cpuT(t, dev, runtime.F32, logits, T, E), renorm); err != nil {
			t.Fatal(err)
		}
		var r Routing
		if err := r.Route(logits, E, K, renorm); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids.I32(), r.Experts) {
			t.Errorf("renorm %v: ids %v, want %v", renorm, ids.I32(), r.Experts)
		}
		for i, w := range wts.F32() {
			if math.Float32bits(w) != math.Float32bits(r.Weights[i]) && !(math.IsNaN(float64(w)) && math.IsNaN(float64(r.Weights[i]))) {
				t.Errorf("renorm %v: weight %d = %v, want %v", renorm, i, w, r.Weights[i])
			}
		}
	}
	if err := b.MoERoute(cpuT(t, dev, runtime.I32, nil, T, E+1), cpuT(t, dev, runtime.F32, nil, T, E+1), cpuT(t, dev, runtime.F32, logits, T, E), false); err == nil {
		t.Error("top 13 of 12 experts routed")
	}
	if err := b.MoERoute(cpuT(t, dev, runtime.F32, nil, T, K), cpuT(t, dev, runtime.F32, nil, T, K), cpuT(t, dev, runtime.F32, logits, T, E), false); err == nil {
		t.Error("F32 ids accepted")
	}
}

// TestMoEFusedCPU: MoEGateUp and MoEDown equal each routed expert run on
// its own (MatMul, SiLUMul, MatMul) and the weighted sum in ascending
// expert order, bit for bit; bad ids, an unset table and mismatched
// weights are errors.
func TestMoEFusedCPU(t *testing.T) {
	dev := runtime.NewCPU(0)
	b, _ := NewCPUBackend(dev)
	rng := rand.New(rand.NewPCG(3, 4))
	const E, K, I, D, T = 6, 2, 24, 16, 3
	rnd := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = rng.Float32()*2 - 1
		}
		return v
	}
	var gate, up, down []*runtime.Tensor
	for e := 0; e < E; e++ {
		gate = append(gate, cpuT(t, dev, runtime.F32, rnd(I*D), I, D))
		up = append(up, cpuT(t, dev, runtime.F32, rnd(I*D), I, D))
		down = append(down, cpuT(t, dev, runtime.F32, rnd(D*I), D, I))
	}
	tab, err := b.NewExpertTable(E)
	if err != nil {
		t.Fatal(err)
	}
	x := cpuT(t, dev, runtime.F32, rnd(T*D), T, D)
	idv := []int32{4, 1, 0, 5, 2, 4}
	ids := cpuT(t, dev, runtime.I32, idv, T, K)
	wts := cpuT(t, dev, runtime.F32, []float32{0.7, 0.3, 0.5, 0.5, 0.9, 0.1}, T, K)
	act := cpuT(t, dev, runtime.F32, nil, T*K, I)
	if err := b.MoEGateUp(act, x, ids, tab); err == nil {
		t.Error("an unset table was used")
	}
	if err := tab.Set(gate, up, down); err != nil {
		t.Fatal(err)
	}
	if err := b.MoEGateUp(act, x, ids, tab); err != nil {
		t.Fatal(err)
	}
	out := cpuT(t, dev, runtime.F32, rnd(T*D), T, D) // overwritten, not added to
	if err := b.MoEDown(out, act, ids, wts, tab); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, T*D)
	g, u, y := make([]float32, I), make([]float32, I), make([]float32, D)
	for tok := 0; tok < T; tok++ {
		xt := x.F32()[tok*D : (tok+1)*D]
		js := []int{0, 1}
		if idv[tok*K] > idv[tok*K+1] {
			js = []int{1, 0}
		}
		for _, j := range js {
			e := idv[tok*K+j]
			gm, _ := AsMat(gate[e])
			um, _ := AsMat(up[e])
			dm, _ := AsMat(down[e])
			if err := MatMul(g, xt, 1, gm); err != nil {
				t.Fatal(err)
			}
			if err := MatMul(u, xt, 1, um); err != nil {
				t.Fatal(err)
			}
			SiLUMul(g, g, u)
			if got := act.F32()[(tok*K+j)*I : (tok*K+j+1)*I]; !slices.Equal(got, g) {
				t.Fatalf("token %d expert %d: act differs", tok, e)
			}
			if err := MatMul(y, g, 1, dm); err != nil {
				t.Fatal(err)
			}
			w := wts.F32()[tok*K+j]
			for c := range y {
				want[tok*D+c] += w * y[c]
			}
		}
	}
	if !slices.Equal(out.F32(), want) {
		t.Errorf("MoEDown differs from the per-expert sum")
	}
	bad := cpuT(t, dev, runtime.I32, []int32{4, 6, 0, 5, 2, 4}, T, K)
	if err := b.MoEGateUp(act, x, bad, tab); err == nil {
		t.Error("expert id 6 of 6 accepted")
	}
	if err := b.MoEDown(out, act, bad, wts, tab); err == nil {
		t.Error("expert id 6 of 6 accepted by MoEDown")
	}
	half := cpuT(t, dev, runtime.BF16, nil, I, D)
	if err := tab.Set(append([]*runtime.Tensor{half}, gate[1:]...), up, down); !errors.Is(err, ErrNotFusable) {
		t.Errorf("mixed dtypes: %v, want ErrNotFusable", err)
	}
	if err := tab.Set(gate[:E-1], up, down); err == nil || errors.Is(err, ErrNotFusable) {
		t.Errorf("5 gate weights for 6 experts: %v", err)
	}
	if err := tab.Set(gate, down, down); err == nil {
		t.Error("up weights of the down shape accepted")
	}
}
