package kernels

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
	"github.com/x448/float16"
)

// allHalf returns every 16-bit pattern, then a long random tail so the
// parallel path runs too.
func allHalf(r *rand.Rand) []uint16 {
	src := make([]uint16, 1<<16, 1<<16+3*convGrain+7)
	for i := range src {
		src[i] = uint16(i)
	}
	for range 3*convGrain + 7 {
		src = append(src, uint16(r.Uint32()))
	}
	return src
}

func TestBF16ToF32Exhaustive(t *testing.T) {
	src := allHalf(rand.New(rand.NewPCG(1, 1)))
	dst := make([]float32, len(src))
	BF16ToF32(dst, src)
	for i, h := range src {
		if got, want := math.Float32bits(dst[i]), math.Float32bits(runtime.BF16ToF32(h)); got != want {
			t.Fatalf("BF16ToF32(%#04x) = %#08x, want %#08x", h, got, want)
		}
	}
}

func TestF16ToF32Exhaustive(t *testing.T) {
	src := allHalf(rand.New(rand.NewPCG(2, 2)))
	dst := make([]float32, len(src))
	F16ToF32(dst, src)
	for i, h := range src {
		if got, want := math.Float32bits(dst[i]), math.Float32bits(float16.Frombits(h).Float32()); got != want {
			t.Fatalf("F16ToF32(%#04x) = %#08x (%v), want %#08x (%v)", h, got, dst[i], want, float16.Frombits(h).Float32())
		}
	}
}

func TestF32ToBF16(t *testing.T) {
	// Every bf16 pattern with the low halves that decide the rounding
	// (ties, both sides of them, all ones), then random bits.
	var src []float32
	for hi := range 1 << 16 {
		for _, lo := range []uint32{0, 1, 0x7fff, 0x8000, 0x8001, 0xffff} {
			src = append(src, math.Float32frombits(uint32(hi)<<16|lo))
		}
	}
	r := rand.New(rand.NewPCG(3, 3))
	for range 200000 {
		src = append(src, math.Float32frombits(r.Uint32()))
	}
	dst := make([]uint16, len(src))
	F32ToBF16(dst, src)
	for i, f := range src {
		if want := runtime.F32ToBF16(f); dst[i] != want {
			t.Fatalf("F32ToBF16(%#08x) = %#04x, want %#04x", math.Float32bits(f), dst[i], want)
		}
	}
	// Round to nearest, independently: the result is one of the two
	// neighbours and the nearer one for finite values.
	for i, f := range src[:1<<18] {
		x := float64(f)
		if math.IsNaN(x) || math.IsInf(x, 0) || math.Abs(x) > 3e38 {
			continue
		}
		got := float64(runtime.BF16ToF32(dst[i]))
		u := math.Float32bits(f) &^ 0xffff
		down := float64(math.Float32frombits(u))
		up := float64(math.Float32frombits(u + 0x10000))
		if math.Abs(got-x) > math.Min(math.Abs(down-x), math.Abs(up-x)) {
			t.Fatalf("F32ToBF16(%v) = %v is not the nearest of %v, %v", f, got, down, up)
		}
	}
}

func TestMatValidateAndRow(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	for _, dt := range []runtime.DType{runtime.F32, runtime.BF16, runtime.F16} {
		m := randMat(r, dt, 3, 5)
		if err := m.Validate(); err != nil {
			t.Fatalf("%v: %v", dt, err)
		}
		row := make([]float32, 5)
		m.RowF32(2, row)
		for c, v := range row {
			if float64(v) != m.at(2, c) {
				t.Fatalf("%v RowF32(2)[%d] = %v, want %v", dt, c, v, m.at(2, c))
			}
		}
	}
	bad := []struct {
		m    Mat
		want string
	}{
		{Mat{DType: runtime.F32, F32: make([]float32, 5), Rows: 2, Cols: 3}, "has 5 values, want Rows*Cols = 6"},
		{Mat{DType: runtime.BF16, Half: make([]uint16, 7), Rows: 2, Cols: 3}, "BF16 2x3 has 7 values"},
		{Mat{DType: runtime.I32, Rows: 1, Cols: 1}, "not supported"},
		{Mat{DType: runtime.F32, Rows: -1, Cols: 1}, "negative"},
	}
	for _, b := range bad {
		if err := b.m.Validate(); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("Validate(%v %dx%d) = %v, want an error containing %q", b.m.DType, b.m.Rows, b.m.Cols, err, b.want)
		}
	}
}

func TestF16RefEncoder(t *testing.T) {
	// The tests' F16 matrices depend on f32ToF16Ref; check it round-trips.
	for h := range 1 << 16 {
		f := float16.Frombits(uint16(h))
		if f.IsNaN() || f.IsInf(0) {
			continue
		}
		if got := f32ToF16Ref(f.Float32()); got != uint16(h) && !(f.Float32() == 0 && got&0x7fff == 0) {
			t.Fatalf("f32ToF16Ref(%v) = %#04x, want %#04x", f.Float32(), got, h)
		}
	}
}
