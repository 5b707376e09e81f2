package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// noFP8Add is a backend with MatMulFP8 but no FP8MatMulAdder: the package
// function MatMulAddFP8 takes the reference path on it.
type noFP8Add struct {
	Backend
	FP8MatMuler
}

// fp8AddTensors makes an FP8 weight [n,k] (random codes, scales of dtype
// sdt in layout), x [m,k] and y [m,n] (random) on dev.
func fp8AddTensors(t *testing.T, r *rand.Rand, dev runtime.Device, m, n, k int, layout FP8Layout, sdt runtime.DType) (w, scale, x, y *runtime.Tensor) {
	t.Helper()
	mk := func(dt runtime.DType, shape ...int) *runtime.Tensor {
		v, err := runtime.NewTensor(dev, dt, shape, "test")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	qm := randQMat(r, runtime.F8E4M3, n, k, layout)
	w = mk(runtime.F8E4M3, n, k)
	copy(w.Bytes(), qm.Q)
	scale = mk(sdt, layout.ScaleShape(n, k)...)
	for i, s := range qm.Scale {
		if sdt == runtime.F32 {
			scale.F32()[i] = s
		} else {
			scale.U16()[i] = runtime.F32ToBF16(s)
		}
	}
	x, y = mk(runtime.F32, m, k), mk(runtime.F32, m, n)
	copy(x.F32(), randF32(r, m*k))
	copy(y.F32(), randF32(r, m*n))
	return w, scale, x, y
}

// TestMatMulAddFP8CPU: the CPU reference of FP8MatMulAdder leaves y + the
// product, bit for bit the values of MatMulFP8 into F32 then Add (with
// and without FP8Activations), on one and several rows, odd widths and
// partial edge blocks; the package function gives the same through a
// backend's own op and through the reference path (MatMulFP8 into
// scratch, Add) of a backend without one.
func TestMatMulAddFP8CPU(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	b, err := NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	if b.AddsFP8(1) {
		t.Error("CPUBackend.AddsFP8(1) = true: the CPU decoder should keep its product-then-add path")
	}
	r := rand.New(rand.NewPCG(18, 1))
	for _, c := range []struct {
		m, n, k, block int
		sdt            runtime.DType
	}{
		{1, 37, 100, 0, runtime.F32},    // odd sizes, per channel
		{1, 129, 256, 128, runtime.F32}, // 128-blocks, a partial edge row block
		{3, 50, 130, 64, runtime.BF16},  // several rows, partial edge blocks both ways
		{2, 7, 16, 16, runtime.BF16},
		{1, 1, 1, 0, runtime.F32},
	} {
		layout := FP8Layout{Block: c.block}
		for _, act := range []bool{false, true} {
			t.Run(fmt.Sprintf("%dx%dx%d_%v_%v_act%v", c.m, c.n, c.k, layout, c.sdt, act), func(t *testing.T) {
				b.FP8Activations = act
				defer func() { b.FP8Activations = false }()
				w, scale, x, y := fp8AddTensors(t, r, dev, c.m, c.n, c.k, layout, c.sdt)
				y0 := append([]float32(nil), y.F32()...)
				prod, _ := runtime.NewTensor(dev, runtime.F32, y.Shape(), "prod")
				if err := b.MatMulFP8(prod, x, w, scale, layout); err != nil {
					t.Fatal(err)
				}
				want := make([]float32, len(y0))
				for i := range want {
					want[i] = y0[i] + prod.F32()[i]
				}
				check := func(what string) {
					t.Helper()
					for i := range want {
						if math.Float32bits(y.F32()[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s: y[%d] = %v, want %v (MatMulFP8, then Add)", what, i, y.F32()[i], want[i])
						}
					}
				}
				if err := b.MatMulAddFP8(y, x, w, scale, layout); err != nil {
					t.Fatal(err)
				}
				check("CPUBackend.MatMulAddFP8")

				copy(y.F32(), y0)
				if err := MatMulAddFP8(b, y, x, w, scale, nil, layout); err != nil {
					t.Fatal(err)
				}
				check("MatMulAddFP8 on the CPU backend")

				copy(y.F32(), y0)
				tmp, _ := runtime.NewTensor(dev, runtime.F32, y.Shape(), "tmp")
				if err := MatMulAddFP8(noFP8Add{b, b}, y, x, w, scale, tmp, layout); err != nil {
					t.Fatal(err)
				}
				check("MatMulAddFP8's reference path")
			})
		}
	}
}

// TestMatMulAddFP8Errors: bad operands get errors naming what is wrong,
// and y is left as it was.
func TestMatMulAddFP8Errors(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	b, err := NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(18, 2))
	layout := FP8Layout{Block: 32}
	w, scale, x, y := fp8AddTensors(t, r, dev, 2, 40, 64, layout, runtime.F32)
	mk := func(dt runtime.DType, shape ...int) *runtime.Tensor {
		v, err := runtime.NewTensor(dev, dt, shape, "bad")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	y0 := append([]float32(nil), y.F32()...)
	for _, c := range []struct {
		what, want string
		run        func() error
	}{
		{"nil scale", "nil tensor", func() error { return b.MatMulAddFP8(y, x, w, nil, layout) }},
		{"nil y", "nil tensor", func() error { return MatMulAddFP8(b, nil, x, w, scale, nil, layout) }},
		{"y BF16", "want F32", func() error { return MatMulAddFP8(b, mk(runtime.BF16, 2, 40), x, w, scale, nil, layout) }},
		{"y BF16 (backend)", "F32", func() error { return b.MatMulAddFP8(mk(runtime.BF16, 2, 40), x, w, scale, layout) }},
		{"y of the wrong size", "want 2×40", func() error { return b.MatMulAddFP8(mk(runtime.F32, 2, 39), x, w, scale, layout) }},
		{"x of the wrong width", "columns", func() error { return b.MatMulAddFP8(y, mk(runtime.F32, 2, 63), w, scale, layout) }},
		{"scale of the wrong shape", "scale of shape", func() error { return b.MatMulAddFP8(y, x, w, mk(runtime.F32, 2, 3), layout) }},
		{"weight not FP8", "F8_E4M3", func() error { return b.MatMulAddFP8(y, x, mk(runtime.F32, 40, 64), scale, layout) }},
		{"no scratch for the reference", "scratch", func() error { return MatMulAddFP8(noFP8Add{b, b}, y, x, w, scale, nil, layout) }},
		{"scratch of the wrong size", "scratch", func() error {
			return MatMulAddFP8(noFP8Add{b, b}, y, x, w, scale, mk(runtime.F32, 2, 39), layout)
		}},
	} {
		err := c.run()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.what, err, c.want)
		}
	}
	for i := range y0 {
		if y.F32()[i] != y0[i] {
			t.Fatalf("y[%d] changed by a failed call: %v, was %v", i, y.F32()[i], y0[i])
		}
	}
}
