//go:build cuda

package all_test

import (
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/decoder"
)

// graphStepLogits prefills prompt into a fresh KV cache of 32 positions,
// captures m's decode step on be and replays it steps times greedily,
// returning the logits of each replayed step.
func graphStepLogits(t *testing.T, m *decoder.Model, be kernels.Backend, prompt []int32, steps int) [][]float32 {
	t.Helper()
	cache, err := m.NewKVCache(be, 32)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Free()
	lt, err := m.Forward(be, cache, prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	v, err := testmodel.ReadLogits(be, lt)
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.CaptureDecode(be, cache)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var out [][]float32
	for range steps {
		if lt, err = g.Step(testmodel.Argmax(0, v)); err != nil {
			t.Fatal(err)
		}
		if v, err = testmodel.ReadLogits(be, lt); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// decodeAB is one A/B test of a decode-path switch of the CUDA backend on
// one model, the scaffolding the decode GPU tests share: set puts mode B
// in force (on) or mode A (off); the methods run m under either on be (the
// backend, or a wrapper counting some of its ops), eager or replaying the
// captured decode graph. The caller saves and restores the switch.
type decodeAB struct {
	t      *testing.T
	m      *decoder.Model
	be     kernels.Backend
	prompt []int32
	set    func(on bool)
}

// tokens is n greedy tokens after the prompt (EOS ignored) with the switch
// on or off, eager or replaying the captured decode graph.
func (ab decodeAB) tokens(on, eager bool, n int) []int32 {
	ab.t.Helper()
	ab.set(on)
	out, err := ab.m.Generate(ab.be, ab.prompt, decoder.GenerateOptions{MaxNewTokens: n, IgnoreEOS: true, Eager: eager})
	if err != nil {
		ab.t.Fatal(err)
	}
	return out
}

// sameTokens fails the test unless n greedy tokens with the switch on
// (eager and graph) and off (graph) are those off and eager, which it
// returns; what names the switch in the messages.
func (ab decodeAB) sameTokens(what string, n int) []int32 {
	ab.t.Helper()
	want := ab.tokens(false, true, n)
	for _, c := range []struct{ on, eager bool }{{true, true}, {true, false}, {false, false}} {
		if got := ab.tokens(c.on, c.eager, n); !slices.Equal(got, want) {
			ab.t.Errorf("%s on %v, eager %v: tokens %v, want %v (off, eager)", what, c.on, c.eager, got, want)
		}
	}
	return want
}

// graphTokensEager fails the test unless n greedy tokens with the switch
// on replaying the captured decode graph are the eager ones.
func (ab decodeAB) graphTokensEager(what string, on bool, n int) {
	ab.t.Helper()
	if eager, graph := ab.tokens(on, true, n), ab.tokens(on, false, n); !slices.Equal(graph, eager) {
		ab.t.Errorf("%s on %v, graph replay: tokens %v, eager %v", what, on, graph, eager)
	}
}

// eagerLogits is the logits of the prefill of the prompt and of steps
// eager one-token forwards on the fixed tokens 11, 12, … in a fresh KV
// cache of 32 positions (steps+1 rows), with the switch on or off.
func (ab decodeAB) eagerLogits(on bool, steps int) [][]float32 {
	ab.t.Helper()
	ab.set(on)
	cache, err := ab.m.NewKVCache(ab.be, 32)
	if err != nil {
		ab.t.Fatal(err)
	}
	defer cache.Free()
	out, err := testmodel.Steps(ab.m, ab.be, cache, ab.prompt, steps, func(s int, _ []float32) int32 { return int32(11 + s) })
	if err != nil {
		ab.t.Fatal(err)
	}
	return out
}

// graphLogits is graphStepLogits (steps greedy replays of the captured
// decode step) with the switch on or off.
func (ab decodeAB) graphLogits(on bool, steps int) [][]float32 {
	ab.t.Helper()
	ab.set(on)
	return graphStepLogits(ab.t, ab.m, ab.be, ab.prompt, steps)
}

// sameLogits fails t unless got has want's rows, each bit for bit the
// same; what names the run and what it is held against.
func sameLogits(t *testing.T, what string, got, want [][]float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d rows of logits, want %d", what, len(got), len(want))
		return
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("%s, row %d: logits differ (max |diff| %g)", what, i, devtest.MaxAbsDiff(got[i], want[i]))
		}
	}
}
