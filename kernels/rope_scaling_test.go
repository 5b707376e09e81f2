package kernels

import (
	"math"
	"testing"
)

// TestRopeScalingTypes: linear divides every frequency by the factor,
// dynamic keeps them (inside the original context), longrope divides each
// by its short factor, and yarn keeps the high frequencies, divides the low
// ones by the factor and blends in between (transformers'
// _compute_yarn_parameters: for d=128, θ=10000, original 4096, β 32/1 the
// correction range is dims [20, 46]).
func TestRopeScalingTypes(t *testing.T) {
	const d, theta = 128, 10000.0
	def, err := RopeInvFreq(d, theta, RopeScaling{})
	if err != nil {
		t.Fatal(err)
	}
	near := func(a, b float32) bool { return math.Abs(float64(a-b)) <= 1e-6*math.Abs(float64(b))+1e-12 }
	lin, err := RopeInvFreq(d, theta, RopeScaling{Type: "linear", Factor: 4})
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := RopeInvFreq(d, theta, RopeScaling{Type: "dynamic", Factor: 4})
	if err != nil {
		t.Fatal(err)
	}
	short := make([]float64, d/2)
	for i := range short {
		short[i] = 1 + float64(i)/10
	}
	lr, err := RopeInvFreq(d, theta, RopeScaling{Type: "longrope", ShortFactor: short})
	if err != nil {
		t.Fatal(err)
	}
	y, err := RopeInvFreq(d, theta, RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositions: 4096})
	if err != nil {
		t.Fatal(err)
	}
	// The correction range, as transformers computes it.
	corr := func(rot float64) float64 { return d * math.Log(4096/(rot*2*math.Pi)) / (2 * math.Log(theta)) }
	lo, hi := math.Floor(corr(32)), math.Ceil(corr(1))
	if lo != 20 || hi != 46 {
		t.Fatalf("correction range [%v, %v], want [20, 46]", lo, hi)
	}
	for i := range def {
		if !near(lin[i], def[i]/4) || dyn[i] != def[i] || !near(lr[i], float32(float64(def[i])/short[i])) {
			t.Fatalf("dim %d: linear %v, dynamic %v, longrope %v; default %v", i, lin[i], dyn[i], lr[i], def[i])
		}
		switch {
		case float64(i) <= lo:
			if !near(y[i], def[i]) {
				t.Errorf("yarn dim %d = %v, want the default %v", i, y[i], def[i])
			}
		case float64(i) >= hi:
			if !near(y[i], def[i]/4) {
				t.Errorf("yarn dim %d = %v, want default/4 = %v", i, y[i], def[i]/4)
			}
		default:
			ramp := (float64(i) - lo) / (hi - lo)
			want := float32(float64(def[i])/4*ramp + float64(def[i])*(1-ramp))
			if !near(y[i], want) {
				t.Errorf("yarn dim %d = %v, want the blend %v", i, y[i], want)
			}
		}
	}
}
