package all_test

import (
	"math"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
)

// rowsQKVCPU is the CPU backend with the many-row fused attention input of
// a GPU backend (kernels.QKVRoPERowsStorer), computed by its separate ops
// (kernels.ProjectRoPEStoreRowsRef), counting the calls by cache kind.
type rowsQKVCPU struct {
	*kernels.CPUBackend
	direct, paged int
}

func (b *rowsQKVCPU) ProjectRoPEStoreRows(a kernels.QKVRoPERows) (bool, error) {
	if a.Positions == nil {
		b.direct++
	} else {
		b.paged++
	}
	return true, kernels.ProjectRoPEStoreRowsRef(b.CPUBackend, a)
}

// TestProjectRoPERowsRouting: with a backend that fuses q, k, v, RoPE and
// the cache store for several rows, the families it applies to (no q/k/v
// biases, no q/k norms: Llama, Mistral) route every layer of every
// several-token forward through it, both for a sequence alone (a
// contiguous cache) and for batches (the paged pool), and give the plain
// CPU backend's logits bit for bit (the fused op's reference is the same
// separate ops); Qwen2 (biases) and Qwen3 (q/k norms) never call it.
func TestProjectRoPERowsRouting(t *testing.T) {
	for _, fx := range []struct {
		dir, family string
		applies     bool
	}{{"../../testdata/tiny-llama", "llama", true}, {"../../testdata/tiny-mistral", "mistral", true},
		{"../../testdata/tiny-qwen2", "qwen2", false}, {"../../testdata/tiny-qwen3", "qwen3", false}} {
		t.Run(fx.family, func(t *testing.T) {
			dev, b := cpu(t)
			m := load(t, fx.dir, dev)
			ps := plans(m.Cfg.VocabSize)
			fb := &rowsQKVCPU{CPUBackend: b.(*kernels.CPUBackend)}
			same := func(what string, got, want [][][]float32) {
				t.Helper()
				for i := range want {
					if len(got[i]) != len(want[i]) {
						t.Fatalf("%s: sequence %d: %d forwards, want %d", what, i, len(got[i]), len(want[i]))
					}
					for s := range want[i] {
						for j := range want[i][s] {
							if math.Float32bits(got[i][s][j]) != math.Float32bits(want[i][s][j]) {
								t.Fatalf("%s: sequence %d forward %d logit %d: %v, plain %v", what, i, s, j, got[i][s][j], want[i][s][j])
							}
						}
					}
				}
			}
			same("alone", runAlone(t, m, fb, ps), runAlone(t, m, b, ps))
			run := func(be kernels.Backend) [][][]float32 {
				cache, err := m.NewPagedCache(be, 64, 4)
				if err != nil {
					t.Fatal(err)
				}
				defer cache.Close()
				return runBatched(t, m, be, cache, ps)
			}
			same("batched", run(fb), run(b))
			// The last layer of a forward that returns fewer rows than it
			// packs makes the queries of those rows alone (decoder's
			// lastrows.go), not through the fused op: the count is of
			// the full last layer's run.
			fb.paged = 0
			m.FullLastLayer = true
			same("batched, the full last layer", run(fb), run(b))
			m.FullLastLayer = false
			L := m.Cfg.NumHiddenLayers
			multi := 0 // prompts of several tokens: each a several-row forward alone
			for _, p := range ps {
				if len(p.prompt) > 1 {
					multi++
				}
			}
			if !fx.applies {
				if fb.direct+fb.paged != 0 {
					t.Errorf("%s: %d contiguous and %d paged calls, want none", fx.family, fb.direct, fb.paged)
				}
				return
			}
			if fb.direct != multi*L {
				t.Errorf("alone: %d calls, want %d (%d several-token prompts × %d layers)", fb.direct, multi*L, multi, L)
			}
			if fb.paged == 0 || fb.paged%L != 0 {
				t.Errorf("batched: %d calls, want a positive multiple of %d layers", fb.paged, L)
			}
		})
	}
}
