//go:build cuda

package all_test

import (
	"testing"

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
