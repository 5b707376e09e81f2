package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestSiLUMulAndAdd(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 13))
	for _, n := range []int{0, 1, 7, 1000, 3*convGrain + 5} {
		g, u := randF32(r, n), randF32(r, n)
		for i := range g {
			g[i] *= 20
		}
		silu, sum := make([]float64, n), make([]float64, n)
		for i := range g {
			x := float64(g[i])
			silu[i] = x / (1 + math.Exp(-x)) * float64(u[i])
			sum[i] = float64(g[i]) + float64(u[i])
		}
		out := make([]float32, n)
		SiLUMul(out, g, u)
		checkClose(t, fmt.Sprintf("SiLUMul n=%d", n), out, silu, 1e-6, 1e-6)
		Add(out, g, u)
		checkClose(t, fmt.Sprintf("Add n=%d", n), out, sum, 0, 1e-7)
		Add(g, g, u) // out aliasing a
		checkClose(t, fmt.Sprintf("Add in place n=%d", n), g, sum, 0, 1e-7)
		want := make([]float64, n)
		for i, x := range u {
			want[i] = float64(x) / (1 + math.Exp(-float64(x))) * float64(x)
		}
		SiLUMul(u, u, u) // out aliasing gate and up
		checkClose(t, fmt.Sprintf("SiLUMul in place n=%d", n), u, want, 1e-6, 1e-6)
	}
	// Extremes: silu(-100)·1 is -0 or a tiny negative, silu(100) = 100.
	out := make([]float32, 2)
	SiLUMul(out, []float32{-100, 100}, []float32{1, 1})
	if !(math.Abs(float64(out[0])) < 1e-30) || out[1] != 100 {
		t.Errorf("SiLUMul extremes = %v", out)
	}
}

func TestElementwisePanics(t *testing.T) {
	for name, f := range map[string]func(){
		"kernels.SiLUMul": func() { SiLUMul(make([]float32, 3), make([]float32, 3), make([]float32, 2)) },
		"kernels.Add":     func() { Add(make([]float32, 2), make([]float32, 3), make([]float32, 3)) },
	} {
		func() {
			defer func() {
				if e := recover(); e == nil || !strings.Contains(fmt.Sprint(e), name) {
					t.Errorf("%s with mismatched lengths: recovered %v", name, e)
				}
			}()
			f()
		}()
	}
}

func TestEmbedding(t *testing.T) {
	r := rand.New(rand.NewPCG(14, 14))
	for _, dt := range dtypes {
		for _, s := range [][2]int{{1, 1}, {10, 3}, {50, 64}, {40, 4096}} {
			vocab, dim := s[0], s[1]
			table := randMat(r, dt, vocab, dim)
			ids := make([]int32, 37)
			for i := range ids {
				ids[i] = int32(r.IntN(vocab))
			}
			ids[0] = int32(vocab - 1)
			out := make([]float32, len(ids)*dim)
			if err := Embedding(out, table, ids); err != nil {
				t.Fatal(err)
			}
			want := make([]float64, len(out))
			for tk, id := range ids {
				for c := range dim {
					want[tk*dim+c] = table.at(int(id), c)
				}
			}
			checkClose(t, fmt.Sprintf("Embedding %v %dx%d", dt, vocab, dim), out, want, 0, 0)
		}
	}
	table := randMat(r, dtypes[1], 32, 4)
	for _, c := range []struct {
		out  []float32
		ids  []int32
		want string
	}{
		{make([]float32, 12), []int32{1, 2, 32}, "kernels.Embedding: id 32 at position 2 is outside the vocabulary [0,32)"},
		{make([]float32, 8), []int32{-1, 0}, "id -1 at position 0"},
		{make([]float32, 7), []int32{1, 2}, "out has 7 values, want len(ids)*dim = 2*4 = 8"},
	} {
		if err := Embedding(c.out, table, c.ids); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Embedding: %v, want an error containing %q", err, c.want)
		}
	}
}
