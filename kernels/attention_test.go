package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

type attnCase struct{ nTok, pos0, nHeads, nKV, d, capacity int }

// refAttention is the float64 definition: for the token at position P and
// head h (KV head h/(nHeads/nKV)), softmax over p ≤ P of q·k_p/sqrt(d), then
// the weighted sum of v_p.
func refAttention(q, kc, vc []float32, c attnCase) []float64 {
	out := make([]float64, len(q))
	group := c.nHeads / c.nKV
	for t := range c.nTok {
		P := c.pos0 + t
		for h := range c.nHeads {
			qv := q[(t*c.nHeads+h)*c.d:][:c.d]
			kvh := h / group
			s := make([]float64, P+1)
			mx := math.Inf(-1)
			for p := range s {
				kv := kc[(p*c.nKV+kvh)*c.d:][:c.d]
				for i := range qv {
					s[p] += float64(qv[i]) * float64(kv[i])
				}
				s[p] /= math.Sqrt(float64(c.d))
				mx = math.Max(mx, s[p])
			}
			var z float64
			for p := range s {
				s[p] = math.Exp(s[p] - mx)
				z += s[p]
			}
			o := out[(t*c.nHeads+h)*c.d:][:c.d]
			for p := range s {
				vv := vc[(p*c.nKV+kvh)*c.d:][:c.d]
				for i := range o {
					o[i] += s[p] / z * float64(vv[i])
				}
			}
		}
	}
	return out
}

func randAttn(r *rand.Rand, c attnCase) (q, kc, vc []float32) {
	q = randF32(r, c.nTok*c.nHeads*c.d)
	for i := range q {
		q[i] *= 3 // peaked enough that the softmax matters
	}
	return q, randF32(r, c.capacity*c.nKV*c.d), randF32(r, c.capacity*c.nKV*c.d)
}

func runAttn(t *testing.T, q, kc, vc []float32, c attnCase, scratch []float32) []float32 {
	t.Helper()
	out := make([]float32, len(q))
	if err := Attention(out, q, kc, vc, c.nTok, c.pos0, c.nHeads, c.nKV, c.d, scratch); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestAttention(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	cases := []attnCase{
		{1, 0, 1, 1, 1, 1}, {1, 5, 4, 2, 8, 8}, {3, 0, 4, 4, 16, 3}, {5, 3, 8, 2, 5, 10},
		{7, 9, 6, 3, 12, 20}, {16, 40, 8, 2, 64, 64}, {1, 300, 8, 2, 64, 400}, {64, 0, 4, 1, 32, 64},
	}
	for _, c := range cases {
		q, kc, vc := randAttn(r, c)
		want := refAttention(q, kc, vc, c)
		for _, sc := range []struct {
			name    string
			scratch []float32
		}{
			{"nil", nil},
			{"short", make([]float32, c.pos0+c.nTok-1)},
			{"full", make([]float32, AttentionScratchLen(c.nTok, c.pos0))},
		} {
			got := runAttn(t, q, kc, vc, c, sc.scratch)
			checkClose(t, fmt.Sprintf("Attention %+v scratch %s", c, sc.name), got, want, 1e-6, 1e-5)
		}
	}
}

func TestAttentionCausal(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 10))
	c := attnCase{nTok: 5, pos0: 2, nHeads: 4, nKV: 2, d: 8, capacity: 12}
	q, kc, vc := randAttn(r, c)
	base := runAttn(t, q, kc, vc, c, nil)
	row := c.nKV * c.d
	// Position pos0+3 is visible to tokens 3 and 4 only; positions past
	// pos0+nTok-1 to none.
	for _, p := range []int{c.pos0 + 3, c.pos0 + c.nTok, c.capacity - 1} {
		k2, v2 := slices.Clone(kc), slices.Clone(vc)
		for i := p * row; i < (p+1)*row; i++ {
			k2[i], v2[i] = 10, -10
		}
		got := runAttn(t, q, k2, v2, c, nil)
		for tk := range c.nTok {
			seg := func(o []float32) []float32 { return o[tk*c.nHeads*c.d : (tk+1)*c.nHeads*c.d] }
			same := slices.Equal(seg(got), seg(base))
			if visible := p <= c.pos0+tk; same == visible {
				t.Errorf("changing position %d: token %d (position %d) changed = %v, want %v", p, tk, c.pos0+tk, !same, visible)
			}
		}
	}
}

func TestAttentionGQA(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 11))
	c := attnCase{nTok: 3, pos0: 4, nHeads: 6, nKV: 2, d: 4, capacity: 7}
	q, kc, vc := randAttn(r, c)
	base := runAttn(t, q, kc, vc, c, nil)
	// Change KV head 1 everywhere: query heads 3..5 read it, 0..2 do not.
	k2, v2 := slices.Clone(kc), slices.Clone(vc)
	for p := range c.capacity {
		for i := range c.d {
			k2[(p*c.nKV+1)*c.d+i] += 1
			v2[(p*c.nKV+1)*c.d+i] += 1
		}
	}
	got := runAttn(t, q, k2, v2, c, nil)
	for tk := range c.nTok {
		for h := range c.nHeads {
			o := (tk*c.nHeads + h) * c.d
			same := slices.Equal(got[o:o+c.d], base[o:o+c.d])
			if reads := h/3 == 1; same == reads {
				t.Errorf("token %d head %d: changed = %v, want %v", tk, h, !same, reads)
			}
		}
	}
}

func TestAttentionPrefillEqualsDecode(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 12))
	c := attnCase{nTok: 9, pos0: 3, nHeads: 8, nKV: 4, d: 16, capacity: 16}
	q, kc, vc := randAttn(r, c)
	prefill := runAttn(t, q, kc, vc, c, nil)
	var steps []float32
	per := c.nHeads * c.d
	for tk := range c.nTok {
		one := c
		one.nTok, one.pos0 = 1, c.pos0+tk
		steps = append(steps, runAttn(t, q[tk*per:(tk+1)*per], kc, vc, one, nil)...)
	}
	want := make([]float64, len(steps))
	for i, v := range steps {
		want[i] = float64(v)
	}
	checkClose(t, "prefill vs one-token steps", prefill, want, 1e-7, 1e-6)
}

func TestAttentionErrors(t *testing.T) {
	q := make([]float32, 2*4*8)
	kc := make([]float32, 5*2*8)
	for _, c := range []struct {
		out, q, k, v               []float32
		nTok, pos0, nHeads, nKV, d int
		want                       string
	}{
		{q, q, kc, kc, 2, 3, 4, 2, 8, "positions up to 5"},
		{q, q, kc, kc, 2, 4, 4, 2, 8, "positions up to 6 exceed the cache capacity 5"},
		{q, q, kc, kc, 2, 0, 4, 3, 8, "nHeads 4 is not a multiple of nKV 3"},
		{q[:60], q, kc, kc, 2, 0, 4, 2, 8, "out 60 values, want nTok*nHeads*headDim = 2*4*8 = 64"},
		{q, q, kc, kc[:72], 2, 0, 4, 2, 8, "caches hold 80 (k) and 72 (v) values"},
		{q, q, kc, kc, 2, -1, 4, 2, 8, "pos0 -1"},
	} {
		err := Attention(c.out, c.q, c.k, c.v, c.nTok, c.pos0, c.nHeads, c.nKV, c.d, nil)
		if c.want == "positions up to 5" { // fits exactly: no error
			if err != nil {
				t.Errorf("Attention at full capacity: %v", err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Attention: %v, want an error containing %q", err, c.want)
		}
	}
}
