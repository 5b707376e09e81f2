package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// randF32 returns n values uniform in [-1,1).
func randF32(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = 2*r.Float32() - 1
	}
	return v
}

// randMat returns a rows×cols matrix of values uniform in [-1,1) stored in dt
// (rounded to dt's precision).
func randMat(r *rand.Rand, dt runtime.DType, rows, cols int) Mat {
	v := randF32(r, rows*cols)
	m := Mat{DType: dt, Rows: rows, Cols: cols}
	switch dt {
	case runtime.F32:
		m.F32 = v
	case runtime.BF16:
		m.Half = make([]uint16, len(v))
		for i, f := range v {
			m.Half[i] = runtime.F32ToBF16(f)
		}
	case runtime.F16:
		m.Half = make([]uint16, len(v))
		for i, f := range v {
			m.Half[i] = f32ToF16Ref(f)
		}
	}
	return m
}

// f32ToF16Ref narrows a value in the normal binary16 range (|f| < 65504,
// subnormals flushed to the nearest multiple of 2^-24) by rounding in float64.
func f32ToF16Ref(f float32) uint16 {
	x := float64(f)
	sign := uint16(0)
	if x < 0 {
		sign, x = 0x8000, -x
	}
	if x < 0x1p-14 { // subnormal
		return sign | uint16(math.RoundToEven(x*0x1p24))
	}
	e := math.Floor(math.Log2(x))
	man := math.RoundToEven((x/math.Exp2(e) - 1) * 1024)
	if man == 1024 {
		man, e = 0, e+1
	}
	return sign | uint16(e+15)<<10 | uint16(man)
}

// at returns element (r,c) of m as float64, decoded independently of the
// kernels' conversion code.
func (m Mat) at(r, c int) float64 {
	i := r*m.Cols + c
	switch m.DType {
	case runtime.F32:
		return float64(m.F32[i])
	case runtime.BF16:
		return float64(runtime.BF16ToF32(m.Half[i]))
	case runtime.F16:
		h := m.Half[i]
		s := 1.0
		if h&0x8000 != 0 {
			s = -1
		}
		e, f := int(h>>10&0x1f), float64(h&0x3ff)
		if e == 0 {
			return s * f * 0x1p-24
		}
		return s * (1 + f/1024) * math.Exp2(float64(e-15))
	}
	panic("bad dtype")
}

// close reports whether got is within abs + rel·|want| of want.
func close(got, want, abs, rel float64) bool {
	return math.Abs(got-want) <= abs+rel*math.Abs(want)
}

// checkClose fails t at the first element outside tolerance.
func checkClose(t *testing.T, what string, got []float32, want []float64, abs, rel float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !close(float64(got[i]), want[i], abs, rel) || math.IsNaN(float64(got[i])) {
			t.Fatalf("%s: [%d] = %v, want %v (abs %g rel %g)", what, i, got[i], want[i], abs, rel)
		}
	}
}

// randTensors returns a maker of tensors on dev of the given dtype (F32, or
// BF16 for any other) and shape, filled from rng uniformly in [-1, 1).
func randTensors(t *testing.T, dev runtime.Device, rng *rand.Rand) func(dt runtime.DType, shape ...int) *runtime.Tensor {
	return func(dt runtime.DType, shape ...int) *runtime.Tensor {
		t.Helper()
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
}

// cpuF32 returns a CPU backend on a fresh device (closed at the test's end)
// and a maker of F32 tensors on it holding a copy of v (freed at the end).
func cpuF32(t *testing.T) (*CPUBackend, func(v []float32, shape ...int) *runtime.Tensor) {
	t.Helper()
	dev := runtime.NewCPU(0)
	t.Cleanup(func() { dev.Close() })
	b, err := NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	return b, func(v []float32, shape ...int) *runtime.Tensor {
		t.Helper()
		tt, err := runtime.NewTensor(dev, runtime.F32, shape, "test")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tt.Buffer().Free)
		copy(tt.F32(), v)
		return tt
	}
}
