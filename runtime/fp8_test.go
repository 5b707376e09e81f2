package runtime

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestFP8KnownValues(t *testing.T) {
	for _, c := range []struct {
		b    uint8
		e4m3 float32
		e5m2 float32
	}{
		{0x00, 0, 0},
		{0x01, 1.0 / 512, 1.0 / 65536}, // smallest subnormals
		{0x38, 1, 0.5},                 // E4M3 1.0 = 0.0111.000; E5M2 0.01110.00 = 2^-1
		{0x3c, 1.5, 1},                 // E5M2 1.0 = 0.01111.00
		{0x7e, 448, float32(math.NaN())},
		{0xfe, -448, float32(math.NaN())},
		{0x7b, 352, 57344},
		{0x7c, 384, float32(math.Inf(1))},
		{0xc0, -2, -2},
	} {
		if g := F8E4M3ToF32(c.b); g != c.e4m3 && !(g != g && c.e4m3 != c.e4m3) {
			t.Errorf("F8E4M3ToF32(%#02x) = %v, want %v", c.b, g, c.e4m3)
		}
		if g := F8E5M2ToF32(c.b); g != c.e5m2 && !(g != g && c.e5m2 != c.e5m2) {
			t.Errorf("F8E5M2ToF32(%#02x) = %v, want %v", c.b, g, c.e5m2)
		}
	}
	if g := F8E4M3ToF32(0x7f); g == g {
		t.Errorf("E4M3 0x7f = %v, want NaN", g)
	}
}

func TestFP8RoundTripEveryByte(t *testing.T) {
	for b := 0; b < 256; b++ {
		if f := F8E4M3ToF32(uint8(b)); f == f {
			if got := F32ToF8E4M3(f); got != uint8(b) && !(f == 0 && got&0x7f == 0) {
				t.Errorf("E4M3 %#02x -> %v -> %#02x", b, f, got)
			}
		} else if g := F8E4M3ToF32(F32ToF8E4M3(f)); g == g {
			t.Errorf("E4M3 NaN %#02x did not stay NaN", b)
		}
		if f := F8E5M2ToF32(uint8(b)); f == f {
			if got := F32ToF8E5M2(f); got != uint8(b) {
				t.Errorf("E5M2 %#02x -> %v -> %#02x", b, f, got)
			}
		} else if g := F8E5M2ToF32(F32ToF8E5M2(f)); g == g {
			t.Errorf("E5M2 NaN %#02x did not stay NaN", b)
		}
	}
}

// nearestEven is the reference rounding: the finite code nearest f, ties to
// the even code, found by search over the table.
func nearestEven(f float32, widen func(uint8) float32) uint8 {
	best, bestD := uint8(0), math.Inf(1)
	for b := 0; b < 256; b++ {
		v := widen(uint8(b))
		if v != v || math.IsInf(float64(v), 0) || (v == 0 && math.Signbit(float64(v)) != math.Signbit(float64(f))) {
			continue // not finite, or a zero of the other sign
		}
		d := math.Abs(float64(v) - float64(f))
		if d < bestD || (d == bestD && b&1 == 0) {
			best, bestD = uint8(b), d
		}
	}
	return best
}

func TestFP8RoundsToNearestEven(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		// magnitudes from subnormal to near the top of each format
		f := float32(math.Exp2(r.Float64()*17-10) * (r.Float64()*2 - 1))
		if math.Abs(float64(f)) < 440 {
			if got, want := F32ToF8E4M3(f), nearestEven(f, F8E4M3ToF32); F8E4M3ToF32(got) != F8E4M3ToF32(want) {
				t.Fatalf("F32ToF8E4M3(%v) = %#02x (%v), want %#02x (%v)", f, got, F8E4M3ToF32(got), want, F8E4M3ToF32(want))
			}
		}
		g := f * 64
		if got, want := F32ToF8E5M2(g), nearestEven(g, F8E5M2ToF32); F8E5M2ToF32(got) != F8E5M2ToF32(want) {
			t.Fatalf("F32ToF8E5M2(%v) = %#02x (%v), want %#02x (%v)", g, got, F8E5M2ToF32(got), want, F8E5M2ToF32(want))
		}
	}
	// Ties: 1 + 1/16 lies halfway between 1 and 1.125 (E4M3): even is 1.
	if got := F32ToF8E4M3(1 + 1.0/16); got != 0x38 {
		t.Errorf("E4M3 tie 1.0625 -> %#02x, want 0x38", got)
	}
	// Saturation and overflow.
	for _, f := range []float32{449, 1e9, float32(math.Inf(1))} {
		if got := F32ToF8E4M3(f); got != 0x7e {
			t.Errorf("F32ToF8E4M3(%v) = %#02x, want 0x7e (448)", f, got)
		}
		if got := F32ToF8E4M3(-f); got != 0xfe {
			t.Errorf("F32ToF8E4M3(%v) = %#02x, want 0xfe (-448)", -f, got)
		}
	}
	if got := F32ToF8E5M2(1e9); got != 0x7c {
		t.Errorf("F32ToF8E5M2(1e9) = %#02x, want 0x7c (+inf)", got)
	}
}
