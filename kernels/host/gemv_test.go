package host

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/x448/float16"
)

// tolRel is the stated tolerance of every host GEMV against the reference:
// |got − want| ≤ tolRel·Σ_c |w[j,c]·x[t,c]| (float32 sums in another
// order; both are within a few √K float32 roundings of the exact sum).
const tolRel = 1e-5

func randF32(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = 2*r.Float32() - 1
	}
	return v
}

func randMat(r *rand.Rand, dt runtime.DType, rows, cols int) kernels.Mat {
	v := randF32(r, rows*cols)
	m := kernels.Mat{DType: dt, Rows: rows, Cols: cols}
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
			m.Half[i] = float16.Fromfloat32(f).Bits()
		}
	}
	return m
}

// randQMat quantizes a random matrix to E4M3 with layout's scales (block:
// random positive scales per block); values span subnormal codes too.
func randQMat(r *rand.Rand, rows, cols, block int) kernels.QMat {
	w := randF32(r, rows*cols)
	for i := range w {
		w[i] *= float32(math.Exp2(float64(-r.IntN(12)))) // reach small codes
	}
	q, s, err := kernels.QuantizeFP8(w, rows, cols)
	if err != nil {
		panic(err)
	}
	m := kernels.QMat{DType: runtime.F8E4M3, Q: q, Scale: s, Layout: kernels.FP8Layout{Block: block}, Rows: rows, Cols: cols}
	if block > 0 {
		m.Scale = make([]float32, m.Layout.ScaleShape(rows, cols).NumElements())
		for i := range m.Scale {
			m.Scale[i] = 0.001 + r.Float32()*0.01
		}
	}
	return m
}

// magnitude returns Σ_c |w[j,c]·x[t,c]| for the dequantized w (f64).
func magnitude(wf []float32, x []float32, T, n, k int) []float64 {
	m := make([]float64, T*n)
	for t := range T {
		for j := range n {
			var s float64
			for c := range k {
				s += math.Abs(float64(wf[j*k+c]) * float64(x[t*k+c]))
			}
			m[t*n+j] = s
		}
	}
	return m
}

// dequant is float32(q)·s(j,c) element by element, as QMat documents.
func dequant(w kernels.QMat) []float32 {
	tab := runtime.F8E4M3Table()
	out := make([]float32, w.Rows*w.Cols)
	for j := range w.Rows {
		for c := range w.Cols {
			var s float32
			if B := w.Layout.Block; B > 0 {
				s = w.Scale[(j/B)*((w.Cols+B-1)/B)+c/B]
			} else {
				s = w.Scale[j]
			}
			out[j*w.Cols+c] = tab[w.Q[j*w.Cols+c]] * s
		}
	}
	return out
}

func widenMat(m kernels.Mat) []float32 {
	out := make([]float32, m.Rows*m.Cols)
	for j := range m.Rows {
		m.RowF32(j, out[j*m.Cols:(j+1)*m.Cols])
	}
	return out
}

func checkTol(t *testing.T, what string, got, want []float32, mag []float64) {
	t.Helper()
	for i := range want {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if !(d <= tolRel*mag[i]+1e-30) {
			t.Fatalf("%s: [%d] = %v, reference %v (|Δ| %.3g > %.0e·%.3g)", what, i, got[i], want[i], d, tolRel, mag[i])
		}
	}
}

// gemvShapes are [n, k]: odd sizes, sizes off the vector width, k < 16,
// n = 1, and a few real-ish ones.
var gemvShapes = [][2]int{
	{1, 1}, {1, 7}, {3, 5}, {1, 16}, {4, 15}, {5, 17}, {7, 33}, {1, 64},
	{13, 100}, {16, 128}, {33, 257}, {64, 511}, {130, 384}, {257, 96}, {9, 1000},
}

// tokenCounts are the T the GEMV tests run: 1..9, fewer under the race
// detector (the reference kernels are slow there).
func tokenCounts() []int {
	if raceEnabled {
		return []int{1, 2, 5, 8}
	}
	return []int{1, 2, 3, 4, 5, 6, 7, 8, 9}
}

func engines(t *testing.T) []*Engine {
	var es []*Engine
	for _, l := range Levels() {
		for _, th := range []int{1, 3} {
			e, err := NewEngine(Options{Threads: th, Level: l})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(e.Close)
			es = append(es, e)
		}
	}
	return es
}

func TestMatMulEqualsReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, e := range engines(t) {
		for _, dt := range []runtime.DType{runtime.BF16, runtime.F16, runtime.F32} {
			for _, sh := range gemvShapes {
				n, k := sh[0], sh[1]
				w := randMat(r, dt, n, k)
				wf := widenMat(w)
				for _, T := range tokenCounts() {
					name := fmt.Sprintf("%v/%d threads/%v/%dx%d/T%d", e.Level(), e.Threads(), dt, n, k, T)
					x := randF32(r, T*k)
					want := make([]float32, T*n)
					if err := kernels.MatMul(want, x, T, w); err != nil {
						t.Fatal(err)
					}
					got := make([]float32, T*n)
					if err := e.MatMul(got, x, T, w); err != nil {
						t.Fatal(err)
					}
					checkTol(t, name, got, want, magnitude(wf, x, T, n, k))
					// Each token's row equals its T = 1 result bit for bit.
					if T > 1 {
						one := make([]float32, n)
						tok := T - 1
						if err := e.MatMul(one, x[tok*k:], 1, w); err != nil {
							t.Fatal(err)
						}
						if !slices.Equal(one, got[tok*n:]) {
							t.Fatalf("%s: token %d differs from its T=1 result", name, tok)
						}
					}
				}
			}
		}
	}
}

func TestMatMulQEqualsReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, e := range engines(t) {
		for _, block := range []int{0, 4, 16, 7} {
			for _, sh := range gemvShapes {
				n, k := sh[0], sh[1]
				w := randQMat(r, n, k, block)
				wf := dequant(w)
				for _, T := range tokenCounts() {
					name := fmt.Sprintf("%v/%d threads/block %d/%dx%d/T%d", e.Level(), e.Threads(), block, n, k, T)
					x := randF32(r, T*k)
					want := make([]float32, T*n)
					if err := kernels.MatMulQ(want, x, T, w); err != nil {
						t.Fatal(err)
					}
					got := make([]float32, T*n)
					if err := e.MatMulQ(got, x, T, w); err != nil {
						t.Fatal(err)
					}
					checkTol(t, name, got, want, magnitude(wf, x, T, n, k))
				}
			}
		}
	}
}

func TestMatMulErrors(t *testing.T) {
	e, err := NewEngine(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	w := randMat(rand.New(rand.NewPCG(1, 1)), runtime.BF16, 3, 4)
	if err := e.MatMul(make([]float32, 3), make([]float32, 5), 1, w); err == nil {
		t.Error("x of 5 values for K = 4: no error")
	}
	if err := e.MatMul(make([]float32, 2), make([]float32, 4), 1, w); err == nil {
		t.Error("out of 2 values for N = 3: no error")
	}
	if _, err := NewEngine(Options{Threads: -1}); err == nil {
		t.Error("-1 threads: no error")
	}
	if _, err := NewEngine(Options{Level: Level(42)}); err == nil {
		t.Error("level 42: no error")
	}
}

// TestPrefetchSameBits: the prefetching BF16 tile (FT_HOST_PREFETCH)
// gives the bits of the plain one, at every SIMD level and distance.
func TestPrefetchSameBits(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for _, l := range Levels() {
		if l == Generic {
			continue
		}
		plain, err := NewEngine(Options{Threads: 2, Level: l, PrefetchBytes: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Close()
		for _, pf := range []int{64, 512, 4096} {
			e, err := NewEngine(Options{Threads: 2, Level: l, PrefetchBytes: pf})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			for _, sh := range [][2]int{{4, 16}, {9, 100}, {64, 4096}, {130, 1000}} {
				w := randMat(r, runtime.BF16, sh[0], sh[1])
				x := randF32(r, sh[1])
				a, b := make([]float32, sh[0]), make([]float32, sh[0])
				if err := plain.MatMul(a, x, 1, w); err != nil {
					t.Fatal(err)
				}
				if err := e.MatMul(b, x, 1, w); err != nil {
					t.Fatal(err)
				}
				for i := range a {
					if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
						t.Fatalf("%v prefetch %d, %dx%d: row %d = %v, plain %v", l, pf, sh[0], sh[1], i, b[i], a[i])
					}
				}
			}
		}
	}
	t.Setenv("FT_HOST_PREFETCH", "x")
	if _, err := NewEngine(Options{}); err == nil {
		t.Fatal("FT_HOST_PREFETCH=x: no error")
	}
}
