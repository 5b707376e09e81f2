package all_test

import (
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/decoder"
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
				V := m.Cfg.VocabSize
				for p, ids := range ref.InputIDs {
					got := testmodel.Forward(t, m, d.Backend, ids, true)
					for i := range ids {
						g, w := kernels.Argmax(got[i*V:(i+1)*V]), kernels.Argmax(ref.Logits[p][i])
						if g != w {
							t.Errorf("prompt %d position %d: top-1 %d, transformers %d (max diff %.3g)", p, i, g, w, maxDiff(got[i*V:(i+1)*V], ref.Logits[p][i]))
						}
					}
				}
				for _, eager := range []bool{true, false} {
					got, err := m.Generate(d.Backend, ref.GreedyPrompt, decoder.GenerateOptions{MaxNewTokens: len(ref.GreedyContinuation), IgnoreEOS: true, Eager: eager})
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(got, ref.GreedyContinuation) {
						t.Errorf("eager %v: greedy continuation\n got  %v\n want %v", eager, got, ref.GreedyContinuation)
					}
				}
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
				want := make([][][]float32, len(ps))
				for i, p := range ps {
					want[i] = testmodel.Run(t, m, d.Backend, p.prompt, p.steps)
				}
				pc, err := m.NewPagedCache(d.Backend, 64, 16)
				if err != nil {
					t.Fatal(err)
				}
				defer pc.Close()
				got := runBatched(t, m, d.Backend, pc, ps)
				for i := range want {
					if len(got[i]) != len(want[i]) {
						t.Fatalf("sequence %d: %d forwards batched, %d alone", i, len(got[i]), len(want[i]))
					}
					for s := range want[i] {
						devtest.Close(t, got[i][s], want[i][s], d.Tol.Abs, d.Tol.Rel)
						if g, w := kernels.Argmax(got[i][s]), kernels.Argmax(want[i][s]); g != w {
							t.Errorf("sequence %d forward %d: greedy token %d batched, %d alone", i, s, g, w)
						}
					}
				}
			})
		}
	})
}
