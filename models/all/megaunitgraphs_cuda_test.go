//go:build cuda

package all_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestDecodeMegaUnitGraphsGPU: a random 4-layer Llama of head width 128
// offloaded onto the GPU with two transfer slots (some layers streamed)
// and per-layer unit graphs (--unit-graphs). Switching DecodeMega on after
// the layers captured their graphs op by op recaptures every layer, and
// every capture then holds the one-kernel layer (one DecodeLayer that ran
// a capture, the streamed layers' over their slot weights); 12 greedy
// steps give the op-by-op tokens, each step's logits within 2% of the
// largest logit (up to a near tie where the greedy paths part). Switching
// it off again recaptures op by op and gives the first run's bits.
func TestDecodeMegaUnitGraphsGPU(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		gb := megaBackend(t, d)
		gb.DecodeMega = false
		dir := megaCheckpoint(t, 4)
		host := runtime.NewCPU(0)
		defer host.Close()
		m := load(t, dir, host)
		L := len(m.Layers)
		be := &megaCounter{Backend: gb}

		fp, err := offload.Measure(m, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ocfg := offload.DefaultConfig(d.Dev)
		ocfg.TransferBlocks = 2
		ocfg.GPUBudget = offload.Budget{Bytes: fp.MinBudget(2) + fp.MaxUnitBytes}
		name := fmt.Sprintf("%s-%s", t.Name(), d.Name)
		if err := offload.Offload(m, &ocfg, name, offload.WithCompile(offload.GraphCompiler(d.Dev.Name(), decoder.UnitGraphs(be)))); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := offload.Release(name, true); err != nil {
				t.Error(err)
			}
			m.DropUnitGraphs()
		}()
		prompt := []int32{5, 17, 42, 3, 9}
		const steps = 12
		greedy := func() [][]float32 {
			t.Helper()
			cache, err := m.NewKVCache(be, 32)
			if err != nil {
				t.Fatal(err)
			}
			defer cache.Free()
			out, err := testmodel.Steps(m, be, cache, prompt, steps, testmodel.Argmax)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		captures := func() int {
			n := 0
			for _, c := range m.GraphCaptures() {
				n += c
			}
			return n
		}
		// Off: the engine's discovery and profiling, then INFERENCE.
		for i := 0; i < 5 && offload.GetOffloadManager(name).Phase() != offload.PhaseInference; i++ {
			greedy()
		}
		if p := offload.GetOffloadManager(name).Phase(); p != offload.PhaseInference {
			t.Fatalf("engine in %v after the warm-up runs", p)
		}
		if len(offload.OffloadUnits(name)) == 0 {
			t.Fatalf("no layer streamed: the budget leaves them all resident")
		}
		off := greedy()
		if be.ran != 0 {
			t.Fatalf("off: %d one-kernel layers ran", be.ran)
		}
		for i, c := range m.GraphCaptures() {
			if c == 0 {
				t.Fatalf("layer %d never captured a graph", i)
			}
		}

		gb.DecodeMega = true
		c0 := captures()
		on := greedy()
		if n := captures() - c0; n < L || be.ran != n {
			t.Errorf("on: %d captures (want every one of the %d layers recaptured), %d one-kernel layers ran in them (want one a capture)", n, L, be.ran)
		}
		for i := range off {
			a, b := kernels.Argmax(on[i]), kernels.Argmax(off[i])
			closeLogits(t, fmt.Sprintf("step %d, one-kernel layer on against off", i), on[i:i+1], off[i:i+1], 0.02)
			if a != b {
				top := float64(slices.Max(off[i]))
				if gap := float64(off[i][b] - off[i][a]); gap > 0.02*max(top, -top) {
					t.Errorf("step %d: token %d on, %d off, not a near tie (off logits %g against %g)", i, a, b, off[i][a], off[i][b])
				}
				break // the greedy paths part here
			}
		}

		gb.DecodeMega = false
		c1, ran := captures(), be.ran
		again := greedy()
		if n := captures() - c1; n < L || be.ran != ran {
			t.Errorf("off again: %d captures (want every one of the %d layers recaptured), %d more one-kernel layers ran (want 0)", n, L, be.ran-ran)
		}
		for i := range off {
			if !slices.Equal(again[i], off[i]) {
				t.Fatalf("off again, step %d: logits differ from the first off run", i)
			}
		}
	})
}
