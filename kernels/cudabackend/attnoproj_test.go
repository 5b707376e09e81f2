//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// aoOperands are one AttnOProj problem on the GPU and its host values.
type aoOperands struct {
	H, K, N, C     int
	q, kc, vc, wo  *runtime.Tensor
	qv, kv, vv, wv []float32
}

func newAOOperands(t *testing.T, rng *rand.Rand, H, K, N, C int) *aoOperands {
	t.Helper()
	o := &aoOperands{H: H, K: K, N: N, C: C}
	o.qv, o.kv, o.vv = randBF16(rng, H*128, 1), randBF16(rng, C*K*128, 1), randBF16(rng, C*K*128, 1)
	o.wv = randBF16(rng, N*H*128, float32(1/math.Sqrt(float64(H*128))))
	o.q = gpu(t, runtime.BF16, o.qv, 1, H, 128)
	o.kc, o.vc = gpu(t, runtime.BF16, o.kv, C, K, 128), gpu(t, runtime.BF16, o.vv, C, K, 128)
	o.wo = gpu(t, runtime.BF16, o.wv, N, H*128)
	return o
}

// reference is y0 + W_o·att in float64, att the attention of the token at
// pos (float64, rounded to bf16 as the separate attention's output is).
func (o *aoOperands) reference(y0 []float32, pos int) []float32 {
	G, n := o.H/o.K, pos+1
	att := make([]float64, o.H*128)
	s := make([]float64, n)
	for h := range o.H {
		kvh := h / G
		m := math.Inf(-1)
		for p := range n {
			d := 0.0
			for j := range 128 {
				d += float64(o.qv[h*128+j]) * float64(o.kv[(p*o.K+kvh)*128+j])
			}
			s[p] = d / math.Sqrt(128)
			m = max(m, s[p])
		}
		l := 0.0
		for p := range n {
			s[p] = math.Exp(s[p] - m)
			l += s[p]
		}
		for j := range 128 {
			a := 0.0
			for p := range n {
				a += s[p] * float64(o.vv[(p*o.K+kvh)*128+j])
			}
			att[h*128+j] = float64(runtime.BF16ToF32(runtime.F32ToBF16(float32(a / l))))
		}
	}
	y := make([]float32, o.N)
	D := o.H * 128
	for r := range o.N {
		a := 0.0
		for i := range D {
			a += float64(o.wv[r*D+i]) * att[i]
		}
		y[r] = float32(float64(y0[r]) + a)
	}
	return y
}

// separate is y0 + W_o·att by today's ops: Attention into a bf16 att, then
// MatMulAdd.
func (o *aoOperands) separate(t *testing.T, y0 []float32, pos int) []float32 {
	t.Helper()
	att := poisoned(t, runtime.BF16, 1, o.H, 128)
	if err := gb.Attention(att, o.q, o.kc, o.vc, pos); err != nil {
		t.Fatal(err)
	}
	flat, err := att.Reshape(1, o.H*128)
	if err != nil {
		t.Fatal(err)
	}
	y := gpu(t, runtime.F32, y0, 1, o.N)
	if err := gb.MatMulAdd(y, flat, o.wo); err != nil {
		t.Fatal(err)
	}
	return read(t, y)
}

// fused is y0 + W_o·att by AttnOProj, which must run.
func (o *aoOperands) fused(t *testing.T, y0 []float32, pos int) []float32 {
	t.Helper()
	y := gpu(t, runtime.F32, y0, 1, o.N)
	if ran, err := gb.AttnOProj(y, o.q, o.kc, o.vc, o.wo, pos); err != nil || !ran {
		t.Fatalf("AttnOProj H%d K%d N%d C%d pos %d: ran %v, %v", o.H, o.K, o.N, o.C, pos, ran, err)
	}
	return read(t, y)
}

// withAttnOProj turns the fused op on (max context 1,024, 128 rows
// prefetched unless pre says otherwise) for the test.
func withAttnOProj(t *testing.T, pre int) {
	on, mc, pr := gb.AttnOProjFused, gb.AttnOProjMaxCtx, gb.AttnOProjPreRows
	gb.AttnOProjFused, gb.AttnOProjMaxCtx, gb.AttnOProjPreRows = true, 1024, pre
	t.Cleanup(func() { gb.AttnOProjFused, gb.AttnOProjMaxCtx, gb.AttnOProjPreRows = on, mc, pr })
}

// TestAttnOProjGPU: the fused one-token attention + o_proj (AttnOProj,
// attn_oproj_g{G}_bf16) against today's Attention then MatMulAdd on the
// GPU within |diff| ≤ 4e-3 + 1e-3·|y| (today's attention rounds its
// probabilities to bf16 for the tensor-core products, the fused one keeps
// them F32, and both round the output to bf16: o differs by about a bf16
// step, about 3e-4 of y at 1σ here) and against a float64 Go reference
// within 2e-3 + 1e-3·|y| (only the bf16 rounding of o may land a step
// apart), at
// Llama-3-8B's shape (32 query heads, 8 KV heads, hidden 4096) and small
// ones with G = 1, 2, 4, 8, contexts 1, 7, 128, 512 and 1,000 in a cache
// of 1,024 positions, with 128 weight rows prefetched, none, and all. A
// second launch on the same inputs gives the same bits (fixed summation
// order; the chunk counters come back to 0).
func TestAttnOProjGPU(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	shapes := []struct{ H, K, N int }{{32, 8, 4096}, {8, 2, 512}, {4, 4, 256}, {4, 2, 300}, {16, 2, 1000}}
	for _, pre := range []int{128, 0, 1 << 16} {
		withAttnOProj(t, pre)
		for si, s := range shapes {
			if pre != 128 && si > 1 {
				continue
			}
			o := newAOOperands(t, rng, s.H, s.K, s.N, 1024)
			for _, ctx := range []int{1, 7, 128, 512, 1000} {
				name := fmt.Sprintf("pre %d, H%d K%d N%d, context %d", pre, s.H, s.K, s.N, ctx)
				y0 := randBF16(rng, s.N, 2)
				got := o.fused(t, y0, ctx-1)
				if slices.Equal(got, y0) {
					t.Fatalf("%s: y unchanged", name)
				}
				compare(t, name+": against Attention then MatMulAdd", got, o.separate(t, y0, ctx-1), 4e-3, 1e-3)
				if s.H <= 8 || ctx <= 128 || ctx == 1000 {
					compare(t, name+": against the float64 reference", got, o.reference(y0, ctx-1), 2e-3, 1e-3)
				}
				if again := o.fused(t, y0, ctx-1); !slices.Equal(again, got) {
					t.Errorf("%s: a second launch differs (max |diff| %g)", name, maxDiff(again, got))
				}
			}
		}
	}
}

// TestAttnOProjGraph: a captured graph of two AttnOProj launches (two
// layers into one residual) replayed at positions set through the step
// buffer, the length changing between replays, gives y bit for bit as the
// same two launches run eagerly at that position.
func TestAttnOProjGraph(t *testing.T) {
	needGPU(t)
	withAttnOProj(t, 128)
	rng := newRNG(t)
	a := newAOOperands(t, rng, 32, 8, 4096, 600)
	b := newAOOperands(t, rng, 32, 8, 4096, 600)
	y0 := randBF16(rng, 4096, 2)
	y := gpu(t, runtime.F32, y0, 1, 4096)
	if err := gb.SetStep([]int32{0}, 10); err != nil {
		t.Fatal(err)
	}
	g, err := gb.CaptureStep(func() error {
		for _, o := range []*aoOperands{a, b} {
			ran, err := gb.AttnOProj(y, o.q, o.kc, o.vc, o.wo, 10)
			if err != nil {
				return err
			}
			if !ran {
				return fmt.Errorf("AttnOProj declined while capturing")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, pos := range []int{10, 11, 300, 17, 599} {
		want := gpu(t, runtime.F32, y0, 1, 4096)
		for _, o := range []*aoOperands{a, b} {
			if ran, err := gb.AttnOProj(want, o.q, o.kc, o.vc, o.wo, pos); err != nil || !ran {
				t.Fatalf("eager at %d: ran %v, %v", pos, ran, err)
			}
		}
		if err := gb.WriteBytes(y, f32Bytes(y0)); err != nil {
			t.Fatal(err)
		}
		if err := gb.SetStep([]int32{0}, pos); err != nil {
			t.Fatal(err)
		}
		if err := g.Replay(); err != nil {
			t.Fatal(err)
		}
		w, got := read(t, want), read(t, y)
		if !slices.Equal(got, w) {
			t.Errorf("replay at position %d differs from eager (max |diff| %g)", pos, maxDiff(got, w))
		}
		if pos == 300 {
			ref := a.reference(y0, pos)
			ref = b.reference(ref, pos)
			compare(t, "replay at 300 against the float64 reference", got, ref, 4e-3, 2e-3)
		}
	}
}

// TestAttnOProjDeclines: off, a cache above the limit, head width 64,
// G = 3, two tokens, an F32 weight or a position outside the cache: the op
// returns false, no error, and y is untouched.
func TestAttnOProjDeclines(t *testing.T) {
	needGPU(t)
	withAttnOProj(t, 128)
	rng := newRNG(t)
	o := newAOOperands(t, rng, 8, 2, 512, 64)
	y0 := randBF16(rng, 512, 2)
	y := gpu(t, runtime.F32, y0, 1, 512)
	decline := func(what string, y, q, kc, vc, wo *runtime.Tensor, pos int) {
		t.Helper()
		if ran, err := gb.AttnOProj(y, q, kc, vc, wo, pos); ran || err != nil {
			t.Errorf("%s: ran %v, %v; want a decline", what, ran, err)
		}
	}
	gb.AttnOProjFused = false
	decline("switch off", y, o.q, o.kc, o.vc, o.wo, 5)
	gb.AttnOProjFused = true
	big := newAOOperands(t, rng, 8, 2, 512, 1025)
	decline("cache of 1,025 positions", y, big.q, big.kc, big.vc, big.wo, 5)
	gb.AttnOProjMaxCtx = 32
	decline("max context 32, cache 64", y, o.q, o.kc, o.vc, o.wo, 5)
	gb.AttnOProjMaxCtx = 1024
	q64 := gpu(t, runtime.BF16, randBF16(rng, 16*64, 1), 1, 16, 64)
	c64 := gpu(t, runtime.BF16, randBF16(rng, 64*4*64, 1), 64, 4, 64)
	decline("head width 64", y, q64, c64, c64, gpu(t, runtime.BF16, nil, 512, 1024), 5)
	q3 := gpu(t, runtime.BF16, randBF16(rng, 6*128, 1), 1, 6, 128)
	decline("G = 3", y, q3, o.kc, o.vc, gpu(t, runtime.BF16, nil, 512, 6*128), 5)
	q2 := gpu(t, runtime.BF16, randBF16(rng, 2*8*128, 1), 2, 8, 128)
	decline("two tokens", gpu(t, runtime.F32, nil, 2, 512), q2, o.kc, o.vc, o.wo, 5)
	decline("F32 weight", y, o.q, o.kc, o.vc, gpu(t, runtime.F32, nil, 512, 1024), 5)
	decline("position 64 in a cache of 64", y, o.q, o.kc, o.vc, o.wo, 64)
	if got := read(t, y); !slices.Equal(got, y0) {
		t.Error("a declined call wrote y")
	}
}
