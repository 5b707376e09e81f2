package all_test

import (
	"math"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
)

// TestMoEEveryDevice: on every device (the CPU, and the GPU in a cuda build),
// each MoE fixture's top-1 token at every prompt position is transformers',
// its greedy continuation is transformers' (op by op and through Generate's
// step path), a prefill then decode steps give the device's own full-prompt
// logits within its tolerance, and the batched forward (mixed lengths,
// ForwardBatch) gives each sequence's logits alone within that tolerance
// and the same greedy tokens.
func TestMoEEveryDevice(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		for _, fx := range moeFixtures {
			t.Run(fx.family, func(t *testing.T) {
				ref := readReference(t, fx.dir)
				m := load(t, fx.dir, d.Dev)
				checkTop1Greedy(t, m, d.Backend, ref)
				V := m.Cfg.VocabSize
				// A prefill of all but the last 4 tokens, then 4 one-token
				// steps, against the full prompt's logits.
				prompt := ref.LongPrompt
				full := testmodel.Forward(t, m, d.Backend, prompt, true)
				cache, err := m.NewKVCache(d.Backend, len(prompt))
				if err != nil {
					t.Fatal(err)
				}
				defer cache.Free()
				n := len(prompt) - 4
				steps, err := testmodel.Steps(m, d.Backend, cache, prompt[:n], 4, func(s int, _ []float32) int32 { return prompt[n+s] })
				if err != nil {
					t.Fatal(err)
				}
				for s, lg := range steps {
					row := n - 1 + s
					devtest.Close(t, lg, full[row*V:(row+1)*V], d.Tol.Abs, d.Tol.Rel)
				}

				ps := plans(V)
				want := runAlone(t, m, d.Backend, ps)
				pc, err := m.NewPagedCache(d.Backend, 64, 16)
				if err != nil {
					t.Fatal(err)
				}
				defer pc.Close()
				got := runBatched(t, m, d.Backend, pc, ps)
				// Routing is discontinuous: where a token's k-th and
				// (k+1)-th router logits nearly tie, the BF16 rounding of a
				// GEMM over 12 rows (batched) and over 9 (alone) can pick
				// different experts, and that token's outputs then differ by
				// O(1) from there on. On the CPU (F32, row-independent)
				// every sequence must match; on a BF16 device at most one of
				// the six may diverge, and it is logged.
				diverged := 0
				for i := range want {
					if len(got[i]) != len(want[i]) {
						t.Fatalf("sequence %d: %d forwards batched, %d alone", i, len(got[i]), len(want[i]))
					}
					ok := true
					for s := range want[i] {
						if d.Dev.Name() == "cpu" {
							devtest.Close(t, got[i][s], want[i][s], d.Tol.Abs, d.Tol.Rel)
							if g, w := kernels.Argmax(got[i][s]), kernels.Argmax(want[i][s]); g != w {
								t.Errorf("sequence %d forward %d: greedy token %d batched, %d alone", i, s, g, w)
							}
							continue
						}
						if !within(got[i][s], want[i][s], d.Tol.Abs, d.Tol.Rel) || kernels.Argmax(got[i][s]) != kernels.Argmax(want[i][s]) {
							ok = false
						}
					}
					if !ok {
						diverged++
						t.Logf("sequence %d: batched and alone diverge (a routing near-tie under BF16?)", i)
					}
				}
				if diverged > 1 {
					t.Errorf("%d of %d sequences diverge batched against alone; a routing near-tie explains one at most", diverged, len(want))
				}
			})
		}
	})
}

// within reports whether every |got−want| ≤ abs + rel·|want|.
func within(got, want []float32, abs, rel float64) bool {
	for i := range want {
		if math.Abs(float64(got[i])-float64(want[i])) > abs+rel*math.Abs(float64(want[i])) {
			return false
		}
	}
	return true
}
