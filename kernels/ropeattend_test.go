package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestRoPEAttendCPU: the CPU op leaves in the cache row of the position
// the rotated k (rotate-half pairs (i, i+d/2)) and v, every other row
// untouched, and in out the softmax attention of the rotated q over rows
// 0..Pos (the last Window of them), each checked against float64
// arithmetic written out here; at GQA ratios 1 and 4, with and without a
// window. Bad operands are errors naming what is wrong.
func TestRoPEAttendCPU(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	b, err := NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 29))
	tensor := func(v []float32, shape ...int) *runtime.Tensor {
		tt, err := runtime.NewTensor(dev, runtime.F32, shape, "test")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tt.Buffer().Free)
		copy(tt.F32(), v)
		return tt
	}
	for _, c := range []struct{ H, KV, d, C, pos, window int }{
		{4, 4, 8, 6, 0, 0},
		{8, 2, 16, 12, 9, 0},
		{8, 2, 16, 12, 9, 4},
	} {
		t.Run(fmt.Sprintf("H%d_KV%d_d%d_pos%d_w%d", c.H, c.KV, c.d, c.pos, c.window), func(t *testing.T) {
			inv, err := RopeInvFreq(c.d, 10000, RopeScaling{})
			if err != nil {
				t.Fatal(err)
			}
			row := c.KV * c.d
			q, k, v := randF32(r, c.H*c.d), randF32(r, row), randF32(r, row)
			kc0, vc0 := randF32(r, c.C*row), randF32(r, c.C*row)
			a := RoPEAttention{Out: tensor(nil, 1, c.H, c.d), Q: tensor(q, 1, c.H, c.d), K: tensor(k, 1, c.KV, c.d), V: tensor(v, 1, c.KV, c.d),
				KCache: tensor(kc0, c.C, c.KV, c.d), VCache: tensor(vc0, c.C, c.KV, c.d), Pos: c.pos, InvFreq: inv, Window: c.window}
			ran, err := b.RoPEAttend(a)
			if err != nil || !ran {
				t.Fatalf("ran %v, %v", ran, err)
			}
			half := c.d / 2
			rot := func(x []float32) []float64 { // one head, rotated at c.pos
				y := make([]float64, c.d)
				for i := range half {
					th := float64(c.pos) * float64(inv[i])
					s, co := math.Sincos(th)
					y[i] = float64(x[i])*co - float64(x[i+half])*s
					y[i+half] = float64(x[i+half])*co + float64(x[i])*s
				}
				return y
			}
			kcw, vcw := make([]float64, c.C*row), make([]float64, c.C*row)
			for i := range kcw {
				kcw[i], vcw[i] = float64(kc0[i]), float64(vc0[i])
			}
			for h := range c.KV {
				copy(kcw[c.pos*row+h*c.d:], rot(k[h*c.d:(h+1)*c.d]))
				for i := range c.d {
					vcw[c.pos*row+h*c.d+i] = float64(v[h*c.d+i])
				}
			}
			near := func(what string, got []float32, want []float64) {
				t.Helper()
				for i := range want {
					if math.Abs(float64(got[i])-want[i]) > 1e-4*(1+math.Abs(want[i])) {
						t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
					}
				}
			}
			near("k cache", a.KCache.F32(), kcw)
			near("v cache", a.VCache.F32(), vcw)
			lo := 0
			if c.window > 0 {
				lo = max(0, c.pos-c.window+1)
			}
			G := c.H / c.KV
			want := make([]float64, c.H*c.d)
			for h := range c.H {
				qr, kvh := rot(q[h*c.d:(h+1)*c.d]), h/G
				scores := make([]float64, c.pos+1-lo)
				top := math.Inf(-1)
				for p := lo; p <= c.pos; p++ {
					dot := 0.0
					for i := range c.d {
						dot += qr[i] * kcw[p*row+kvh*c.d+i]
					}
					scores[p-lo] = dot / math.Sqrt(float64(c.d))
					top = max(top, scores[p-lo])
				}
				sum := 0.0
				for j := range scores {
					scores[j] = math.Exp(scores[j] - top)
					sum += scores[j]
				}
				for p := lo; p <= c.pos; p++ {
					for i := range c.d {
						want[h*c.d+i] += scores[p-lo] / sum * vcw[p*row+kvh*c.d+i]
					}
				}
			}
			near("out", a.Out.F32(), want)
		})
	}
	inv, err := RopeInvFreq(8, 10000, RopeScaling{})
	if err != nil {
		t.Fatal(err)
	}
	good := func() RoPEAttention {
		return RoPEAttention{Out: tensor(nil, 1, 4, 8), Q: tensor(nil, 1, 4, 8), K: tensor(nil, 1, 2, 8), V: tensor(nil, 1, 2, 8),
			KCache: tensor(nil, 5, 2, 8), VCache: tensor(nil, 5, 2, 8), Pos: 2, InvFreq: inv}
	}
	for _, c := range []struct {
		what string
		edit func(*RoPEAttention)
		want string
	}{
		{"nil out", func(a *RoPEAttention) { a.Out = nil }, "out is nil"},
		{"out of the wrong shape", func(a *RoPEAttention) { a.Out = tensor(nil, 1, 2, 8) }, "out [1 2 8]"},
		{"two tokens", func(a *RoPEAttention) { a.Q, a.Out = tensor(nil, 2, 4, 8), tensor(nil, 2, 4, 8) }, "q [2 4 8]"},
		{"3 query heads for 2 KV heads", func(a *RoPEAttention) { a.Q, a.Out = tensor(nil, 1, 3, 8), tensor(nil, 1, 3, 8) }, "3 query heads are not a multiple of 2 KV heads"},
		{"3 frequencies", func(a *RoPEAttention) { a.InvFreq = inv[:3] }, "head width 8 with 3 frequencies"},
		{"position past the cache", func(a *RoPEAttention) { a.Pos = 5 }, "position 5 outside the cache's 5 rows"},
		{"negative window", func(a *RoPEAttention) { a.Window = -1 }, "sliding window -1 is negative"},
	} {
		a := good()
		c.edit(&a)
		if _, err := b.RoPEAttend(a); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.what, err, c.want)
		}
	}
}
