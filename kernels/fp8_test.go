package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// randQMat is an n×k FP8 matrix of random codes (finite values only) with
// random positive scales in the layout.
func randQMat(r *rand.Rand, dt runtime.DType, n, k int, layout FP8Layout) QMat {
	m := QMat{DType: dt, Rows: n, Cols: k, Layout: layout, Q: make([]uint8, n*k)}
	widen := runtime.F8E4M3ToF32
	if dt == runtime.F8E5M2 {
		widen = runtime.F8E5M2ToF32
	}
	for i := range m.Q {
		for {
			b := uint8(r.IntN(256))
			if v := widen(b); v == v && !math.IsInf(float64(v), 0) {
				m.Q[i] = b
				break
			}
		}
	}
	m.Scale = make([]float32, layout.ScaleShape(n, k).NumElements())
	for i := range m.Scale {
		m.Scale[i] = float32(math.Exp2(-8 - 4*r.Float64()))
	}
	return m
}

// refMatMulQ is the product with the dequantized weight in float64, the
// dequantization written out from the definitions, with Σ|terms|.
func refMatMulQ(x []float32, m int, w QMat) (out, mag []float64) {
	widen := runtime.F8E4M3ToF32
	if w.DType == runtime.F8E5M2 {
		widen = runtime.F8E5M2ToF32
	}
	scale := func(j, c int) float32 {
		if w.Layout.Block == 0 {
			return w.Scale[j]
		}
		B := w.Layout.Block
		return w.Scale[(j/B)*((w.Cols+B-1)/B)+c/B]
	}
	out, mag = make([]float64, m*w.Rows), make([]float64, m*w.Rows)
	for i := range m {
		for j := range w.Rows {
			var s, a float64
			for c := range w.Cols {
				wv := float64(widen(w.Q[j*w.Cols+c]) * scale(j, c)) // one float32 product, as checkpoints dequantize
				p := float64(x[i*w.Cols+c]) * wv
				s += p
				a += math.Abs(p)
			}
			out[i*w.Rows+j], mag[i*w.Rows+j] = s, a
		}
	}
	return out, mag
}

func TestMatMulQ(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	shapes := [][3]int{{1, 7, 5}, {1, 128, 96}, {3, 100, 70}, {5, 257, 131}, {1, 64, 320}, {12, 320, 128}}
	for _, dt := range []runtime.DType{runtime.F8E4M3, runtime.F8E5M2} {
		for _, layout := range []FP8Layout{{}, {Block: 32}, {Block: 64}} {
			for _, s := range shapes {
				m, k, n := s[0], s[1], s[2]
				t.Run(fmt.Sprintf("%v/%v/%dx%dx%d", dt, layout, m, k, n), func(t *testing.T) {
					w := randQMat(r, dt, n, k, layout)
					x := randF32(r, m*k)
					out := make([]float32, m*n)
					for i := range out {
						out[i] = float32(math.NaN())
					}
					if err := MatMulQ(out, x, m, w); err != nil {
						t.Fatal(err)
					}
					want, mag := refMatMulQ(x, m, w)
					for i := range out {
						if tol := 0x1p-23*float64(k+1)*mag[i] + 1e-30; !(math.Abs(float64(out[i])-want[i]) <= tol) {
							t.Fatalf("out[%d,%d] = %v, want %v (tol %g)", i/n, i%n, out[i], want[i], tol)
						}
					}
					// Row 0 alone gives the same bits as row 0 of the batch.
					one := make([]float32, n)
					if err := MatMulQ(one, x[:k], 1, w); err != nil {
						t.Fatal(err)
					}
					for j := range one {
						if one[j] != out[j] {
							t.Fatalf("row 0 alone: out[%d] = %v, in the batch %v", j, one[j], out[j])
						}
					}
				})
			}
		}
	}
}

func TestMatMulQErrors(t *testing.T) {
	good := QMat{DType: runtime.F8E4M3, Rows: 2, Cols: 3, Q: make([]uint8, 6), Scale: make([]float32, 2)}
	out, x := make([]float32, 2), make([]float32, 3)
	if err := MatMulQ(out, x, 1, good); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		w    QMat
		want string
	}{
		{"dtype", QMat{DType: runtime.BF16, Rows: 2, Cols: 3, Q: make([]uint8, 6), Scale: make([]float32, 2)}, "dtype BF16"},
		{"codes", QMat{DType: runtime.F8E4M3, Rows: 2, Cols: 3, Q: make([]uint8, 5), Scale: make([]float32, 2)}, "has 5 values"},
		{"scales", QMat{DType: runtime.F8E4M3, Rows: 2, Cols: 3, Q: make([]uint8, 6), Scale: make([]float32, 3)}, "3 scales"},
		{"block scales", QMat{DType: runtime.F8E4M3, Rows: 2, Cols: 3, Q: make([]uint8, 6), Scale: make([]float32, 4), Layout: FP8Layout{Block: 2}}, "want 2"},
	} {
		if err := MatMulQ(out, x, 1, c.w); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

func TestCPUBackendMatMulFP8(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	b, err := NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(9, 9))
	n, k, m, B := 70, 100, 3, 32 // partial edge blocks both ways
	for _, layout := range []FP8Layout{{}, {Block: B}} {
		for _, sdt := range []runtime.DType{runtime.F32, runtime.BF16} {
			qm := randQMat(r, runtime.F8E4M3, n, k, layout)
			w, _ := runtime.NewTensor(dev, runtime.F8E4M3, runtime.Shape{n, k}, "w")
			copy(w.Bytes(), qm.Q)
			scale, _ := runtime.NewTensor(dev, sdt, layout.ScaleShape(n, k), "scale")
			for i, s := range qm.Scale {
				if sdt == runtime.F32 {
					scale.F32()[i] = s
				} else {
					scale.U16()[i] = runtime.F32ToBF16(s)
					qm.Scale[i] = runtime.BF16ToF32(scale.U16()[i])
				}
			}
			x, _ := runtime.NewTensor(dev, runtime.F32, runtime.Shape{m, k}, "x")
			copy(x.F32(), randF32(r, m*k))
			out, _ := runtime.NewTensor(dev, runtime.F32, runtime.Shape{m, n}, "out")
			if err := MatMulFP8(b, out, x, w, scale, layout); err != nil {
				t.Fatal(err)
			}
			want := make([]float32, m*n)
			if err := MatMulQ(want, x.F32(), m, qm); err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if out.F32()[i] != want[i] {
					t.Fatalf("%v scale %v: out[%d] = %v, want %v", layout, sdt, i, out.F32()[i], want[i])
				}
			}
		}
	}
	w, _ := runtime.NewTensor(dev, runtime.F8E4M3, runtime.Shape{4, 6}, "w")
	x, _ := runtime.NewTensor(dev, runtime.F32, runtime.Shape{1, 6}, "x")
	out, _ := runtime.NewTensor(dev, runtime.F32, runtime.Shape{1, 4}, "out")
	bf, _ := runtime.NewTensor(dev, runtime.BF16, runtime.Shape{4, 6}, "bf")
	s41, _ := runtime.NewTensor(dev, runtime.F32, runtime.Shape{4, 1}, "s")
	s4, _ := runtime.NewTensor(dev, runtime.F32, runtime.Shape{4}, "s")
	s22, _ := runtime.NewTensor(dev, runtime.F32, runtime.Shape{2, 2}, "s")
	i32, _ := runtime.NewTensor(dev, runtime.I32, runtime.Shape{4, 1}, "s")
	if err := b.MatMulFP8(out, x, w, s4, FP8Layout{}); err != nil {
		t.Errorf("scale [N] per channel: %v", err)
	}
	if err := b.MatMulFP8(out, x, w, s22, FP8Layout{Block: 3}); err != nil {
		t.Errorf("scale [2 2] for block 3 of [4 6]: %v", err)
	}
	for _, c := range []struct {
		name     string
		w, scale *runtime.Tensor
		layout   FP8Layout
		want     string
	}{
		{"bf16 weight", bf, s41, FP8Layout{}, "weight is BF16"},
		{"scale shape", w, s22, FP8Layout{}, "scale of shape [2 2]"},
		{"block scale shape", w, s41, FP8Layout{Block: 4}, "want [1 2]"},
		{"scale dtype", w, i32, FP8Layout{}, "scale is I32"},
	} {
		if err := b.MatMulFP8(out, x, c.w, c.scale, c.layout); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

func TestQuantizeFP8(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	n, k := 9, 50
	w := randF32(r, n*k)
	for c := range k {
		w[4*k+c] = 0 // a zero row
	}
	w[2*k+7] = -5 // a row whose maximum is negative
	q, s, err := QuantizeFP8(w, n, k)
	if err != nil {
		t.Fatal(err)
	}
	if s[4] != 1 {
		t.Errorf("zero row scale %v, want 1", s[4])
	}
	if got := runtime.F8E4M3ToF32(q[2*k+7]) * s[2]; got != -5 {
		t.Errorf("row maximum -5 comes back as %v", got)
	}
	for j := range n {
		for c := range k {
			v, d := w[j*k+c], runtime.F8E4M3ToF32(q[j*k+c])*s[j]
			// 3 mantissa bits: half an ulp is 2^-4 relative; below the
			// smallest normal (2^-6·scale) the step is 2^-9·scale.
			if tol := math.Max(math.Abs(float64(v))/16, float64(s[j])*0x1p-10) * 1.0001; math.Abs(float64(d-v)) > tol {
				t.Fatalf("w[%d,%d] = %v dequantizes to %v (tol %g)", j, c, v, d, tol)
			}
		}
	}
	if _, _, err := QuantizeFP8(w, n, k+1); err == nil {
		t.Error("QuantizeFP8 with a wrong size: no error")
	}
}

func TestQuantizeRowsF32(t *testing.T) {
	x := []float32{1, -2, 448, 0.001, 0, 0, 0, 0, 3, 3.1, -3.2, 3.3}
	got := make([]float32, len(x))
	QuantizeRowsF32(got, x, 4)
	// Row 0's scale is 1 (max 448): values round to E4M3 as they are.
	for i, want := range []float32{1, -2, 448, runtime.F8E4M3ToF32(runtime.F32ToF8E4M3(0.001))} {
		if got[i] != want {
			t.Errorf("row 0 [%d] = %v, want %v", i, got[i], want)
		}
	}
	for i := 4; i < 8; i++ {
		if got[i] != 0 {
			t.Errorf("zero row [%d] = %v", i, got[i])
		}
	}
	// Row 2: its maximum 3.3 maps to 448 exactly; the rest within 1/16.
	if s := float32(3.3) / 448; got[11] != runtime.F8E4M3ToF32(runtime.F32ToF8E4M3(3.3/s))*s {
		t.Errorf("row 2 max = %v", got[11])
	}
	for i := 8; i < 12; i++ {
		if d := math.Abs(float64(got[i] - x[i])); d > math.Abs(float64(x[i]))/16 {
			t.Errorf("row 2 [%d] = %v from %v", i, got[i], x[i])
		}
	}
}
