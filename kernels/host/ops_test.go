package host

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

func TestExpf(t *testing.T) {
	for x := float32(-87); x <= 88; x += 0.01 {
		want := math.Exp(float64(x))
		if got := float64(expf(x)); math.Abs(got-want) > 3e-7*want {
			t.Fatalf("expf(%v) = %v, want %v", x, got, want)
		}
	}
	if !math.IsInf(float64(expf(89)), 1) || expf(-90) != 0 {
		t.Errorf("expf(89) = %v, expf(-90) = %v: want +Inf and 0", expf(89), expf(-90))
	}
}

func TestSiLUMulAndGateUp(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, e := range engines(t) {
		for _, n := range []int{1, 7, 100, 5000, 14336} {
			g, u := randF32(r, n), randF32(r, n)
			for i := range g {
				g[i] *= 20
			}
			want := make([]float32, n)
			kernels.SiLUMul(want, g, u)
			got := make([]float32, n)
			if err := e.SiLUMul(got, g, u); err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if math.Abs(float64(got[i]-want[i])) > 1e-6*math.Abs(float64(want[i]))+1e-30 {
					t.Fatalf("%v: SiLUMul[%d] = %v, reference %v", e.Level(), i, got[i], want[i])
				}
			}
		}
		for _, sh := range [][2]int{{1, 1}, {9, 17}, {352, 128}, {100, 1000}} {
			n, k := sh[0], sh[1]
			wg, wu := randMat(r, runtime.BF16, n, k), randMat(r, runtime.BF16, n, k)
			for _, T := range []int{1, 3} {
				x := randF32(r, T*k)
				g, u, want := make([]float32, T*n), make([]float32, T*n), make([]float32, T*n)
				kernels.MatMul(g, x, T, wg)
				kernels.MatMul(u, x, T, wu)
				kernels.SiLUMul(want, g, u)
				got := make([]float32, T*n)
				if err := e.GateUpSiLU(got, x, T, wg, wu); err != nil {
					t.Fatal(err)
				}
				mg, mu := magnitude(widenMat(wg), x, T, n, k), magnitude(widenMat(wu), x, T, n, k)
				for i := range want {
					// silu' ≤ 1.1 and |u| ≤ Σ|w·x|: the GEMV tolerance carried through.
					tol := tolRel*(1.1*mg[i]*math.Abs(float64(u[i]))+math.Abs(float64(g[i]))*mu[i]) + 1e-6*math.Abs(float64(want[i])) + 1e-30
					if d := math.Abs(float64(got[i] - want[i])); d > tol {
						t.Fatalf("%v %dx%d T%d: GateUpSiLU[%d] = %v, reference %v", e.Level(), n, k, T, i, got[i], want[i])
					}
				}
			}
		}
	}
}

func TestAttentionEqualsReference(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	cases := []struct{ nTok, pos0, H, K, d, window int }{
		{1, 0, 1, 1, 1, 0}, {1, 5, 4, 2, 32, 0}, {1, 40, 32, 8, 128, 0}, {1, 99, 6, 3, 20, 0},
		{3, 10, 4, 4, 16, 0}, {8, 0, 8, 2, 24, 0}, {1, 50, 4, 2, 32, 7}, {5, 20, 4, 1, 33, 4},
		// Long contexts with fewer units than threads: split positions
		// (attentionSplit), some splits empty under a short window.
		{1, 700, 8, 2, 64, 0}, {1, 511, 32, 8, 128, 0}, {1, 300, 4, 4, 32, 100}, {2, 200, 4, 1, 16, 0},
		{1, 200, 2, 1, 8, 1}, {1, 260, 3, 1, 20, 130},
		// Groups of 4 query heads on the register kernel (wsum4), with
		// heads left over (6 a group) and widths of several column blocks.
		{1, 130, 8, 1, 64, 0}, {1, 77, 12, 2, 128, 0}, {2, 300, 16, 2, 128, 50}, {1, 600, 32, 8, 128, 0},
	}
	for _, e := range engines(t) {
		split := 0
		for _, c := range cases {
			name := fmt.Sprintf("%v/%d threads/%+v", e.Level(), e.Threads(), c)
			ctx := c.pos0 + c.nTok
			capacity := ctx + 3
			q := randF32(r, c.nTok*c.H*c.d)
			kc, vc := randF32(r, capacity*c.K*c.d), randF32(r, capacity*c.K*c.d)
			want := make([]float32, len(q))
			if err := kernels.AttentionWindow(want, q, kc, vc, c.nTok, c.pos0, c.H, c.K, c.d, c.window, nil); err != nil {
				t.Fatal(err)
			}
			if S := e.attnSplits(c.nTok*c.K, ctx); S > 1 {
				name += fmt.Sprintf("/%d splits", S)
				split++
			}
			got := make([]float32, len(q))
			if err := e.Attention(got, q, kc, vc, c.nTok, c.pos0, c.H, c.K, c.d, c.window); err != nil {
				t.Fatal(err)
			}
			// Values are in [-1,1) and the outputs convex combinations of
			// them: an absolute tolerance is the relative one.
			for i := range want {
				if d := math.Abs(float64(got[i] - want[i])); !(d <= 1e-5) {
					t.Fatalf("%s: [%d] = %v, reference %v", name, i, got[i], want[i])
				}
			}
		}
		if split == 0 {
			t.Errorf("%v/%d threads: no case split the positions", e.Level(), e.Threads())
		}
	}
	e := engines(t)[len(engines(t))-1]
	if err := e.Attention(make([]float32, 4), make([]float32, 4), make([]float32, 4), make([]float32, 4), 1, 3, 1, 1, 4, 0); err == nil {
		t.Error("positions past the cache: no error")
	}
}

// TestAttentionOnePassSameBits: the one-pass weighted sum (axpyHeads, with
// the register kernel where it applies) gives the bits of the per-head
// passes (FT_HOST_ATTN=legacy), split and unsplit.
func TestAttentionOnePassSameBits(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	defer func(v bool) { attnOnePass = v }(attnOnePass)
	for _, e := range engines(t) {
		for _, c := range []struct{ pos0, H, K, d, window int }{
			{40, 32, 8, 128, 0}, {700, 32, 8, 128, 0}, {300, 12, 2, 64, 0}, {90, 8, 2, 48, 20}, {520, 6, 1, 32, 0},
		} {
			q := randF32(r, c.H*c.d)
			kc, vc := randF32(r, (c.pos0+1)*c.K*c.d), randF32(r, (c.pos0+1)*c.K*c.d)
			outs := [2][]float32{make([]float32, len(q)), make([]float32, len(q))}
			for i, one := range []bool{true, false} {
				attnOnePass = one
				if err := e.Attention(outs[i], q, kc, vc, 1, c.pos0, c.H, c.K, c.d, c.window); err != nil {
					t.Fatal(err)
				}
			}
			for i := range outs[0] {
				if math.Float32bits(outs[0][i]) != math.Float32bits(outs[1][i]) {
					t.Fatalf("%v/%d threads/%+v: [%d] one pass %v, per head %v", e.Level(), e.Threads(), c, i, outs[0][i], outs[1][i])
				}
			}
		}
	}
}
