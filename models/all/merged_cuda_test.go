//go:build cuda

package all_test

import (
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/runtime"
)

// countingGPU is the CUDA backend counting its merged GEMMs that ran.
type countingGPU struct {
	*cudabackend.Backend
	qkv, gateUp int
}

func (c *countingGPU) MatMulMerged(outs []*runtime.Tensor, x *runtime.Tensor, ws []*runtime.Tensor) (bool, error) {
	ran, err := c.Backend.MatMulMerged(outs, x, ws)
	if ran {
		c.qkv++
	}
	return ran, err
}

func (c *countingGPU) GateUpSiLUMerged(out, x, wg, wu *runtime.Tensor) (bool, error) {
	ran, err := c.Backend.GateUpSiLUMerged(out, x, wg, wu)
	if ran {
		c.gateUp++
	}
	return ran, err
}

// TestMergedGEMMBatchGPU: on the GPU, a resident model (place.Bind packs
// each layer's q, k, v and gate, up back to back) runs the batched plans
// (prefills and decode steps of several sequences) with the merged GEMMs
// (FT_MERGED_GEMM on: Llama merges q/k/v and gate/up in every layer of
// every multi-token forward; Qwen2's q/k/v biases sit between its weights,
// so only gate/up merge) and without (NoMergedGEMM, as FT_MERGED_GEMM=0:
// none). Both runs choose the same greedy token at every forward; their
// logits' largest difference is logged (bf16 GEMMs of different shapes sum
// in different orders).
func TestMergedGEMMBatchGPU(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		gb, ok := d.Backend.(*cudabackend.Backend)
		if !ok {
			t.Skipf("the merged GEMMs are the CUDA backend's; %s has none", d.Name)
		}
		defer func(off bool) { gb.NoMergedGEMM = off }(gb.NoMergedGEMM)
		for _, fx := range []struct {
			dir, family string
			qkv         bool
		}{{"../../testdata/tiny-llama", "llama", true}, {"../../testdata/tiny-qwen2", "qwen2", false}} {
			t.Run(fx.family, func(t *testing.T) {
				m := load(t, fx.dir, d.Dev)
				m.FullLastLayer = true // every layer alike: no last layer making its returned rows' queries alone (decoder's lastrows.go)
				ps := plans(m.Cfg.VocabSize)
				run := func(off bool) ([][][]float32, *countingGPU) {
					gb.NoMergedGEMM = off
					cg := &countingGPU{Backend: gb}
					cache, err := m.NewPagedCache(cg, 64, 4)
					if err != nil {
						t.Fatal(err)
					}
					defer cache.Close()
					return runBatched(t, m, cg, cache, ps), cg
				}
				on, con := run(false)
				off, coff := run(true)
				L := m.Cfg.NumHiddenLayers
				if con.gateUp == 0 || con.gateUp%L != 0 {
					t.Errorf("merged on: gate/up merged %d times, want a positive multiple of %d layers", con.gateUp, L)
				}
				if want := map[bool]int{true: con.gateUp, false: 0}[fx.qkv]; con.qkv != want {
					t.Errorf("merged on: q/k/v merged %d times, want %d", con.qkv, want)
				}
				if coff.qkv != 0 || coff.gateUp != 0 {
					t.Errorf("NoMergedGEMM: %d q/k/v and %d gate/up merged, want none", coff.qkv, coff.gateUp)
				}
				worst := 0.0
				for i := range on {
					if len(on[i]) != len(off[i]) {
						t.Fatalf("sequence %d: %d forwards merged, %d not", i, len(on[i]), len(off[i]))
					}
					for s := range on[i] {
						worst = max(worst, maxDiff(on[i][s], off[i][s]))
						if g, w := kernels.Argmax(on[i][s]), kernels.Argmax(off[i][s]); g != w {
							t.Errorf("sequence %d forward %d: greedy token %d merged, %d separate", i, s, g, w)
						}
					}
				}
				t.Logf("%s: q/k/v merged %d, gate/up %d times; logits differ by at most %.3g", fx.family, con.qkv, con.gateUp, worst)
			})
		}
	})
}
