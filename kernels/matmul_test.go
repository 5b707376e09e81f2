package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// refMatMul is out[i,j] = Σ_k x[i,k]·w[j,k] in float64, with Σ_k |x·w| for
// the tolerance of a float32 sum.
func refMatMul(x []float32, m int, w Mat) (out, mag []float64) {
	out, mag = make([]float64, m*w.Rows), make([]float64, m*w.Rows)
	for i := range m {
		for j := range w.Rows {
			var s, a float64
			for k := range w.Cols {
				p := float64(x[i*w.Cols+k]) * w.at(j, k)
				s += p
				a += math.Abs(p)
			}
			out[i*w.Rows+j], mag[i*w.Rows+j] = s, a
		}
	}
	return out, mag
}

var dtypes = []runtime.DType{runtime.F32, runtime.BF16, runtime.F16}

func TestMatMul(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	shapes := [][3]int{ // m, k, n
		{1, 1, 1}, {1, 7, 5}, {1, 128, 352}, {1, 33, 1030}, {1, 515, 301},
		{2, 3, 4}, {3, 13, 9}, {5, 33, 17}, {4, 64, 64}, {9, 100, 67},
		{17, 257, 131}, {64, 96, 70}, {2, 1000, 3},
	}
	for _, dt := range dtypes {
		for _, s := range shapes {
			m, k, n := s[0], s[1], s[2]
			t.Run(fmt.Sprintf("%v/%dx%dx%d", dt, m, k, n), func(t *testing.T) {
				w := randMat(r, dt, n, k)
				x := randF32(r, m*k)
				out := make([]float32, m*n)
				for i := range out {
					out[i] = float32(math.NaN()) // every output must be written
				}
				if err := MatMul(out, x, m, w); err != nil {
					t.Fatal(err)
				}
				want, mag := refMatMul(x, m, w)
				for i := range out {
					// A float32 sum of k terms errs by at most about
					// k·2^-24·Σ|terms| (products included).
					if tol := 0x1p-23*float64(k+1)*mag[i] + 1e-30; !(math.Abs(float64(out[i])-want[i]) <= tol) {
						t.Fatalf("out[%d,%d] = %v, want %v (tol %g)", i/n, i%n, out[i], want[i], tol)
					}
				}
			})
		}
	}
}

func TestMatMulEdges(t *testing.T) {
	w := Mat{DType: runtime.F32, F32: []float32{}, Rows: 3, Cols: 0}
	out := []float32{1, 2, 3, 4, 5, 6}
	if err := MatMul(out, nil, 2, w); err != nil {
		t.Fatal(err)
	}
	for _, v := range out {
		if v != 0 {
			t.Fatalf("k = 0: out = %v, want zeros", out)
		}
	}
	if err := MatMul(nil, nil, 0, Mat{DType: runtime.BF16, Half: make([]uint16, 6), Rows: 2, Cols: 3}); err != nil {
		t.Fatal(err)
	}
}

func TestMatMulErrors(t *testing.T) {
	w := Mat{DType: runtime.F32, F32: make([]float32, 4*32), Rows: 4, Cols: 32}
	cases := []struct {
		out, x []float32
		m      int
		w      Mat
		want   string
	}{
		{make([]float32, 16), make([]float32, 100), 4, w, "kernels.MatMul: x has 100 values, want m*k = 4*32 = 128"},
		{make([]float32, 15), make([]float32, 128), 4, w, "out has 15 values, want m*n = 4*4 = 16"},
		{nil, nil, -1, w, "negative m"},
		{make([]float32, 4), make([]float32, 32), 1, Mat{DType: runtime.BF16, Half: make([]uint16, 3), Rows: 4, Cols: 32}, "kernels.MatMul: w: kernels.Mat: BF16 4x32 has 3 values"},
	}
	for _, c := range cases {
		if err := MatMul(c.out, c.x, c.m, c.w); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("MatMul: got %v, want an error containing %q", err, c.want)
		}
	}
}

func TestRMSNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	for _, dt := range dtypes {
		for _, s := range [][2]int{{1, 1}, {1, 7}, {3, 64}, {5, 129}, {300, 256}, {2, 4096}} {
			rows, dim := s[0], s[1]
			w := randMat(r, dt, 1, dim)
			x := randF32(r, rows*dim)
			for i := range x {
				x[i] *= 10
			}
			const eps = 1e-5
			want := make([]float64, len(x))
			for i := range rows {
				var ss float64
				for c := range dim {
					v := float64(x[i*dim+c])
					ss += v * v
				}
				inv := 1 / math.Sqrt(ss/float64(dim)+eps)
				for c := range dim {
					want[i*dim+c] = float64(x[i*dim+c]) * inv * w.at(0, c)
				}
			}
			out := make([]float32, len(x))
			if err := RMSNorm(out, x, rows, w, eps); err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("RMSNorm %v %dx%d", dt, rows, dim)
			checkClose(t, name, out, want, 1e-6, 1e-5)
			// In place, and w given as a column instead of a row.
			w.Rows, w.Cols = dim, 1
			if err := RMSNorm(x, x, rows, w, eps); err != nil {
				t.Fatal(err)
			}
			checkClose(t, name+" in place", x, want, 1e-6, 1e-5)
		}
	}
	w := Mat{DType: runtime.F32, F32: make([]float32, 8), Rows: 1, Cols: 8}
	if err := RMSNorm(make([]float32, 16), make([]float32, 15), 2, w, 1e-5); err == nil || !strings.Contains(err.Error(), "kernels.RMSNorm: x has 15 values, want rows*dim = 2*8 = 16") {
		t.Errorf("RMSNorm size error: %v", err)
	}
	if err := RMSNorm(make([]float32, 8), make([]float32, 16), 2, w, 1e-5); err == nil || !strings.Contains(err.Error(), "out has 8 values") {
		t.Errorf("RMSNorm out error: %v", err)
	}
}

// TestNoAllocs checks that the small calls of a decode step (tiny-model
// shapes, inline path) allocate nothing once pools are warm.
func TestNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	r := rand.New(rand.NewPCG(7, 7))
	w := randMat(r, runtime.BF16, 352, 128)
	x, out := randF32(r, 128), make([]float32, 352)
	nw := randMat(r, runtime.BF16, 1, 128)
	inv, _ := RopeInvFreq(32, 10000, RopeScaling{})
	q, kc, vc := randF32(r, 4*32), randF32(r, 64*2*32), randF32(r, 64*2*32)
	ao := make([]float32, 4*32)
	logits := randF32(r, 1000)
	ids := []int32{3}
	rng := rand.New(rand.NewPCG(1, 1))
	calls := map[string]func(){
		"MatMul":    func() { _ = MatMul(out, x, 1, w) },
		"RMSNorm":   func() { _ = RMSNorm(x, x, 1, nw, 1e-5) },
		"ApplyRoPE": func() { _ = ApplyRoPE(q, 1, 4, 32, 17, inv) },
		"Attention": func() { _ = Attention(ao, q, kc, vc, 1, 40, 4, 2, 32, nil) },
		"SiLUMul":   func() { SiLUMul(x, x, x) },
		"Add":       func() { Add(x, x, x) },
		"Embedding": func() { _ = Embedding(x, w, ids) },
		"Sample":    func() { _, _ = Sample(logits, SampleParams{Temperature: 0.8, TopK: 40, TopP: 0.9}, rng) },
		"SampleP":   func() { _, _ = Sample(logits, SampleParams{Temperature: 0.8, TopP: 0.9}, rng) },
	}
	for name, f := range calls {
		if n := testing.AllocsPerRun(50, f); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, n)
		}
	}
}

// TestMatMulRowsIndependentOfM: each row of a prefill GEMM has the bits of
// the decode GEMV of that row alone.
func TestMatMulRowsIndependentOfM(t *testing.T) {
	r := rand.New(rand.NewPCG(20, 20))
	for _, dt := range dtypes {
		const m, k, n = 7, 301, 131 // n%4 and k%4 ≠ 0: the tails too
		w := randMat(r, dt, n, k)
		x := randF32(r, m*k)
		all := make([]float32, m*n)
		if err := MatMul(all, x, m, w); err != nil {
			t.Fatal(err)
		}
		one := make([]float32, n)
		for i := range m {
			if err := MatMul(one, x[i*k:(i+1)*k], 1, w); err != nil {
				t.Fatal(err)
			}
			for j := range one {
				if one[j] != all[i*n+j] {
					t.Fatalf("%v row %d col %d: GEMV %v, GEMM %v", dt, i, j, one[j], all[i*n+j])
				}
			}
		}
	}
}
