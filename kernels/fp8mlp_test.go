package kernels

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// codesNearTie reports whether E4M3 codes got and want of the value v
// (already divided by its row scale) differ only because v lies within rel
// of the midpoint between two neighbouring codes: the same sign, one step
// apart, v that close to the middle of their values.
func codesNearTie(got, want uint8, v float32, rel float64) bool {
	if got == want {
		return true
	}
	if got&0x80 != want&0x80 {
		return false
	}
	a, b := int(got&0x7f), int(want&0x7f)
	if a-b != 1 && b-a != 1 {
		return false
	}
	tab := runtime.F8E4M3Table()
	mid := (math.Abs(float64(tab[got])) + math.Abs(float64(tab[want]))) / 2
	return math.Abs(math.Abs(float64(v))-mid) <= rel*mid
}

// TestSiLUQuantRowsFP8: the fused FP8 MLP's middle step, fed the exact
// unscaled gate and up products of per-token-quantized activations and
// E4M3 weights (Σ codes·codes, what the FP8 GEMMs compute) and the token
// scales, gives the codes and row scales that the CPU's W8A8 emulation
// reaches by its own order (GateUpSiLUFP8 with FP8Activations: scales
// applied before the float32 sums, SiLUMul, then QuantizeRowFP8 of the down
// projection's input): the two orders differ only by float32 rounding
// (≈2⁻²⁰ relative), so the scales agree to 1e-5 and a code may differ only
// by one step where h/scale lies within 1e-4 of a rounding midpoint (at
// most a few of the T·I codes). Rows: a zero row (scale 1) and rows of
// magnitudes 2⁻⁶…2⁶.
func TestSiLUQuantRowsFP8(t *testing.T) {
	const T, D, I = 6, 96, 80
	r := rand.New(rand.NewPCG(7, 8))
	cpu := runtime.NewCPU(0)
	b, err := NewCPUBackend(cpu)
	if err != nil {
		t.Fatal(err)
	}
	b.FP8Activations = true
	gate, up := randQMat(r, runtime.F8E4M3, I, D, FP8Layout{}), randQMat(r, runtime.F8E4M3, I, D, FP8Layout{})
	x := randF32(r, T*D)
	for i := range D {
		x[i] = 0
	}
	for row := 1; row < T; row++ {
		for i := range D {
			x[row*D+i] *= float32(math.Exp2(float64(3*row - 9)))
		}
	}
	// The GPU's order: x quantized per row, unscaled products, then the
	// fused step.
	tab := runtime.F8E4M3Table()
	qx, xs := make([]uint8, T*D), make([]float32, T)
	for row := range T {
		QuantizeRowFP8(qx[row*D:(row+1)*D], x[row*D:(row+1)*D], &xs[row])
	}
	rawG, rawU := make([]float32, T*I), make([]float32, T*I)
	for row := range T {
		for c := range I {
			var sg, su float64
			for k := range D {
				xv := float64(tab[qx[row*D+k]])
				sg += xv * float64(tab[gate.Q[c*D+k]])
				su += xv * float64(tab[up.Q[c*D+k]])
			}
			rawG[row*I+c], rawU[row*I+c] = float32(sg), float32(su)
		}
	}
	q, hs := make([]uint8, T*I), make([]float32, T)
	if err := SiLUQuantRowsFP8(q, hs, rawG, rawU, xs, gate.Scale, up.Scale, I); err != nil {
		t.Fatal(err)
	}
	// The emulation's order.
	tensor := func(dt runtime.DType, data []byte, shape ...int) *runtime.Tensor {
		x, err := runtime.NewTensor(cpu, dt, shape, "test")
		if err != nil {
			t.Fatal(err)
		}
		copy(x.Bytes(), data)
		return x
	}
	f32b := func(v []float32) []byte {
		x := tensor(runtime.F32, nil, len(v))
		copy(x.F32(), v)
		return x.Bytes()
	}
	wg, wu := tensor(runtime.F8E4M3, gate.Q, I, D), tensor(runtime.F8E4M3, up.Q, I, D)
	sg, su := tensor(runtime.F32, f32b(gate.Scale), I, 1), tensor(runtime.F32, f32b(up.Scale), I, 1)
	xt := tensor(runtime.F32, f32b(x), T, D)
	h, scratch := tensor(runtime.F32, nil, T, I), tensor(runtime.F32, nil, T, I)
	if err := b.GateUpSiLUFP8(h, scratch, xt, wg, wu, sg, su, FP8Layout{}); err != nil {
		t.Fatal(err)
	}
	want, wantS := make([]uint8, T*I), make([]float32, T)
	hv := h.F32()
	for row := range T {
		QuantizeRowFP8(want[row*I:(row+1)*I], hv[row*I:(row+1)*I], &wantS[row])
	}
	if hs[0] != 1 || wantS[0] != 1 {
		t.Errorf("zero row: scales %v and %v, want 1", hs[0], wantS[0])
	}
	ties := 0
	for row := range T {
		if d := math.Abs(float64(hs[row]-wantS[row])) / float64(wantS[row]); d > 1e-5 {
			t.Errorf("row %d: scale %v, the emulation's %v (relative %.2g)", row, hs[row], wantS[row], d)
		}
		for c := range I {
			i := row*I + c
			if q[i] == want[i] {
				continue
			}
			if !codesNearTie(q[i], want[i], hv[i]/wantS[row], 1e-4) {
				t.Errorf("row %d col %d: code %#02x, the emulation's %#02x (h %v, scale %v)", row, c, q[i], want[i], hv[i], wantS[row])
				continue
			}
			ties++
		}
	}
	if ties > 4 {
		t.Errorf("%d of %d codes differ at rounding midpoints, want at most a few", ties, T*I)
	}
	t.Logf("%d of %d codes differ at rounding midpoints", ties, T*I)
}

// TestSiLUQuantRowsFP8Errors: mismatched lengths are errors naming them.
func TestSiLUQuantRowsFP8Errors(t *testing.T) {
	f := make([]float32, 8)
	q := make([]uint8, 8)
	one := []float32{1, 1}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"I 0", SiLUQuantRowsFP8(q, one, f, f, one, f, f, 0), "not rows of I = 0"},
		{"I 3", SiLUQuantRowsFP8(q, one, f, f, one, f[:3], f[:3], 3), "not rows of I = 3"},
		{"up", SiLUQuantRowsFP8(q, one, f, f[:4], one, f[:4], f[:4], 4), "up 4"},
		{"codes", SiLUQuantRowsFP8(q[:4], one, f, f, one, f[:4], f[:4], 4), "codes 4"},
		{"token scales", SiLUQuantRowsFP8(q, one, f, f, one[:1], f[:4], f[:4], 4), "1 token scales in"},
		{"channel scales", SiLUQuantRowsFP8(q, one, f, f, one, f[:4], f[:3], 4), "3 up channel scales"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, c.err, c.want)
		}
	}
}
