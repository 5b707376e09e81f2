package kernels

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// refWindow is sliding-window attention from the full-attention definition:
// the token at position P attends like a token at position P−lo of a cache
// that starts at row lo = max(0, P−window+1).
func refWindow(q, kc, vc []float32, c attnCase, window int) []float64 {
	row, per := c.nKV*c.d, c.nHeads*c.d
	var out []float64
	for t := range c.nTok {
		P := c.pos0 + t
		lo := 0
		if window > 0 {
			lo = max(0, P-window+1)
		}
		one := attnCase{nTok: 1, pos0: P - lo, nHeads: c.nHeads, nKV: c.nKV, d: c.d, capacity: c.capacity - lo}
		out = append(out, refAttention(q[t*per:(t+1)*per], kc[lo*row:], vc[lo*row:], one)...)
	}
	return out
}

func TestAttentionWindow(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 21))
	for _, tc := range []struct {
		c      attnCase
		window int
	}{
		{attnCase{12, 0, 4, 2, 8, 12}, 4},   // prefill past the window
		{attnCase{1, 20, 4, 2, 8, 24}, 8},   // decode past the window
		{attnCase{5, 3, 4, 4, 16, 10}, 1},   // a window of one: each token sees itself
		{attnCase{6, 2, 6, 3, 8, 8}, 100},   // a window wider than the context: full attention
		{attnCase{40, 0, 8, 2, 32, 40}, 8},  // the family fixtures' long prompt
		{attnCase{3, 37, 8, 2, 32, 40}, 16}, // a chunk after a cached prefix
	} {
		q, kc, vc := randAttn(r, tc.c)
		want := refWindow(q, kc, vc, tc.c, tc.window)
		for _, scratch := range [][]float32{nil, make([]float32, AttentionScratchLen(tc.c.nTok, tc.c.pos0))} {
			got := make([]float32, len(q))
			if err := AttentionWindow(got, q, kc, vc, tc.c.nTok, tc.c.pos0, tc.c.nHeads, tc.c.nKV, tc.c.d, tc.window, scratch); err != nil {
				t.Fatal(err)
			}
			checkClose(t, fmt.Sprintf("AttentionWindow %+v window %d", tc.c, tc.window), got, want, 1e-6, 1e-5)
		}
		if tc.window >= tc.c.pos0+tc.c.nTok {
			checkClose(t, "wide window = full attention", runAttn(t, q, kc, vc, tc.c, nil), want, 1e-6, 1e-5)
		}
	}
	// A window changes what a query past it sees: the first position stops mattering.
	c := attnCase{1, 9, 2, 1, 4, 10}
	q, kc, vc := randAttn(r, c)
	full, win := make([]float32, len(q)), make([]float32, len(q))
	if err := AttentionWindow(full, q, kc, vc, 1, 9, 2, 1, 4, 0, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		kc[i], vc[i] = 50, -50
	}
	if err := AttentionWindow(win, q, kc, vc, 1, 9, 2, 1, 4, 9, nil); err != nil {
		t.Fatal(err)
	}
	if err := AttentionWindow(full, q, kc, vc, 1, 9, 2, 1, 4, 0, nil); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(full) == fmt.Sprint(win) {
		t.Errorf("position 0 changed: full attention should see it, window 9 should not; both gave %v", win)
	}
	if err := AttentionWindow(win, q, kc, vc, 1, 9, 2, 1, 4, -1, nil); err == nil || !strings.Contains(err.Error(), "sliding window -1") {
		t.Errorf("negative window: got %v", err)
	}
}

func TestAddBias(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	b, err := NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	x, _ := runtime.NewTensor(dev, runtime.F32, runtime.Shape{2, 3}, "x")
	copy(x.F32(), []float32{1, 2, 3, 4, 5, 6})
	bias, _ := runtime.NewTensor(dev, runtime.BF16, runtime.Shape{3}, "bias")
	for i, v := range []float32{0.5, -1, 2} {
		bias.U16()[i] = runtime.F32ToBF16(v)
	}
	if err := AddBias(b, x, bias); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(x.F32()), fmt.Sprint([]float32{1.5, 1, 5, 4.5, 4, 8}); got != want {
		t.Errorf("AddBias = %s, want %s", got, want)
	}
	wrong, _ := runtime.NewTensor(dev, runtime.F32, runtime.Shape{4}, "wrong")
	if err := b.AddBias(x, wrong); err == nil || !strings.Contains(err.Error(), "as wide as the bias") {
		t.Errorf("mismatched bias: got %v", err)
	}
}
