package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestRopeInvFreqDefault(t *testing.T) {
	for _, c := range []struct {
		d     int
		theta float64
	}{{2, 10000}, {8, 10000}, {64, 10000}, {128, 500000}} {
		for _, typ := range []string{"", "default"} {
			got, err := RopeInvFreq(c.d, c.theta, RopeScaling{Type: typ})
			if err != nil {
				t.Fatal(err)
			}
			want := make([]float64, c.d/2)
			for i := range want {
				want[i] = 1 / math.Pow(c.theta, float64(2*i)/float64(c.d))
			}
			checkClose(t, fmt.Sprintf("inv_freq d=%d theta=%v", c.d, c.theta), got, want, 0, 1e-7)
		}
	}
}

func TestRopeInvFreqLlama3(t *testing.T) {
	// theta 500000, d 8, factor 8, low 1, high 4, original 8192: the
	// wavelengths 2π·500000^(i/4) are 6.3, 167, 4443 and 118145, so i = 0, 1
	// are kept (< 8192/4 = 2048), i = 3 is divided by 8 (> 8192/1) and i = 2
	// is blended with smooth = (8192/4443 − 1)/(4 − 1) ≈ 0.2813.
	s := RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192}
	got, err := RopeInvFreq(8, 500000, s)
	if err != nil {
		t.Fatal(err)
	}
	b2 := 1 / math.Sqrt(500000)
	smooth := (8192/(2*math.Pi/b2) - 1) / 3
	if math.Abs(smooth-0.28127) > 1e-4 {
		t.Fatalf("test arithmetic: smooth = %v", smooth)
	}
	want := []float64{
		1,
		math.Pow(500000, -0.25),
		(1-smooth)*b2/8 + smooth*b2,
		math.Pow(500000, -0.75) / 8,
	}
	checkClose(t, "llama3 inv_freq", got, want, 0, 1e-7)

	// Llama 3.1 8B's own settings: frequencies fall monotonically, the
	// fastest are unchanged and the slowest slowed eightfold.
	got, err = RopeInvFreq(128, 500000, s)
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := RopeInvFreq(128, 500000, RopeScaling{})
	for i := 1; i < len(got); i++ {
		if !(got[i] < got[i-1]) {
			t.Fatalf("llama3 inv_freq not decreasing at %d: %v then %v", i, got[i-1], got[i])
		}
	}
	if got[0] != plain[0] || math.Abs(float64(got[63])-float64(plain[63])/8) > 1e-7*float64(plain[63]) {
		t.Fatalf("llama3 ends: %v %v, plain %v %v", got[0], got[63], plain[0], plain[63])
	}
}

func TestRopeInvFreqErrors(t *testing.T) {
	for _, c := range []struct {
		d     int
		theta float64
		s     RopeScaling
		want  string
	}{
		{7, 10000, RopeScaling{}, "head dimension 7"},
		{8, 0, RopeScaling{}, "theta 0"},
		{8, 10000, RopeScaling{Type: "su"}, `"su" not supported (want default, linear, dynamic, yarn, llama3 or longrope)`},
		{8, 10000, RopeScaling{Type: "yarn"}, "yarn scaling needs factor > 0"},
		{8, 10000, RopeScaling{Type: "longrope", ShortFactor: []float64{1}}, "longrope needs 4 short factors"},
		{8, 10000, RopeScaling{Type: "linear"}, "linear scaling needs a positive factor"},
		{8, 10000, RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 4, HighFreqFactor: 1, OriginalMaxPositions: 8192}, "llama3 scaling needs"},
	} {
		if _, err := RopeInvFreq(c.d, c.theta, c.s); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("RopeInvFreq(%d, %v, %+v) = %v, want an error containing %q", c.d, c.theta, c.s, err, c.want)
		}
	}
}

func TestApplyRoPE(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	for _, c := range []struct{ nTok, nHeads, d, pos0 int }{
		{1, 1, 2, 0}, {1, 4, 8, 5}, {3, 2, 16, 0}, {5, 3, 6, 70000}, {300, 4, 64, 11}, {2, 2, 1024, 3},
	} {
		// 0.1 is not exact in float32: at position 70000 the float32 product
		// pos·0.1 differs from the float64 one by ~1e-4 rad, so this also
		// pins the float32 angle convention.
		inv := make([]float32, c.d/2)
		for i := range inv {
			inv[i] = float32(math.Pow(10000, -float64(2*i)/float64(c.d)))
		}
		if len(inv) > 1 {
			inv[1] = 0.1
		}
		x := randF32(r, c.nTok*c.nHeads*c.d)
		want := make([]float64, len(x))
		half := c.d / 2
		for tk := range c.nTok {
			pos := float32(c.pos0 + tk)
			for h := range c.nHeads {
				base := (tk*c.nHeads + h) * c.d
				for i := range half {
					th := float64(pos * inv[i])
					a, b := float64(x[base+i]), float64(x[base+i+half])
					want[base+i] = a*math.Cos(th) - b*math.Sin(th)
					want[base+i+half] = b*math.Cos(th) + a*math.Sin(th)
				}
			}
		}
		if err := ApplyRoPE(x, c.nTok, c.nHeads, c.d, c.pos0, inv); err != nil {
			t.Fatal(err)
		}
		checkClose(t, fmt.Sprintf("RoPE %+v", c), x, want, 1e-6, 1e-6)
	}
}

func TestApplyRoPEErrors(t *testing.T) {
	inv := make([]float32, 4)
	for _, c := range []struct {
		x                     []float32
		nTok, nHeads, d, pos0 int
		inv                   []float32
		want                  string
	}{
		{make([]float32, 15), 2, 1, 8, 0, inv, "x has 15 values, want nTok*nHeads*headDim = 2*1*8 = 16"},
		{make([]float32, 16), 2, 1, 8, 0, inv[:3], "invFreq has 3 values, want headDim/2 = 4"},
		{make([]float32, 14), 2, 1, 7, 0, inv, "positive even head dimension"},
		{make([]float32, 16), 2, 1, 8, -1, inv, "pos0 -1"},
	} {
		if err := ApplyRoPE(c.x, c.nTok, c.nHeads, c.d, c.pos0, c.inv); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ApplyRoPE: %v, want an error containing %q", err, c.want)
		}
	}
}
