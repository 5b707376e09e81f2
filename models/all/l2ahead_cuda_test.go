//go:build cuda

package all_test

import (
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/models/decoder"
)

// TestL2AheadDecodeGPU: on the tiny Llama and Qwen2 fixtures, 20 greedy
// tokens after a prompt, eager and replaying the decode graph, are the same
// with FT_L2_AHEAD's budget on (evict_last and normal) as with it off; and
// the logits of a prefill and eager one-token steps are bit for bit the
// same: the norms' and attention's prefetches change no value.
func TestL2AheadDecodeGPU(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		gb, ok := d.Backend.(*cudabackend.Backend)
		if !ok {
			t.Skipf("FT_L2_AHEAD is the CUDA backend's; %s has none", d.Name)
		}
		on := kernels.L2AheadBudget{O: 24 << 20, QKV: 8 << 20, MLP: 8 << 20}
		with := func(b kernels.L2AheadBudget, last bool) (restore func()) {
			ob, ol := gb.L2Ahead, gb.L2AheadLast
			gb.L2Ahead, gb.L2AheadLast = b, last
			return func() { gb.L2Ahead, gb.L2AheadLast = ob, ol }
		}
		for _, dir := range []string{"../../testdata/tiny-llama", "../../testdata/tiny-qwen2"} {
			t.Run(dir[len("../../testdata/"):], func(t *testing.T) {
				m := load(t, dir, d.Dev)
				prompt := []int32{5, 17, 42, 3, 9}
				gen := func(b kernels.L2AheadBudget, last, eager bool) []int32 {
					defer with(b, last)()
					out, err := m.Generate(d.Backend, prompt, decoder.GenerateOptions{MaxNewTokens: 20, IgnoreEOS: true, Eager: eager})
					if err != nil {
						t.Fatal(err)
					}
					return out
				}
				steps := func(b kernels.L2AheadBudget, last bool) [][]float32 {
					defer with(b, last)()
					cache, err := m.NewKVCache(d.Backend, 32)
					if err != nil {
						t.Fatal(err)
					}
					defer cache.Free()
					out, err := testmodel.Steps(m, d.Backend, cache, prompt, 6, func(s int, _ []float32) int32 { return int32(11 + s) })
					if err != nil {
						t.Fatal(err)
					}
					return out
				}
				off := kernels.L2AheadBudget{}
				want, wantGraph := gen(off, false, true), gen(off, false, false)
				offSteps := steps(off, false)
				for _, last := range []bool{true, false} {
					if got := gen(on, last, true); !slices.Equal(got, want) {
						t.Errorf("evict_last %v, eager: tokens %v, want %v (off)", last, got, want)
					}
					if got := gen(on, last, false); !slices.Equal(got, wantGraph) {
						t.Errorf("evict_last %v, graph: tokens %v, want %v (off)", last, got, wantGraph)
					}
					onSteps := steps(on, last)
					for i := range offSteps {
						if !slices.Equal(onSteps[i], offSteps[i]) {
							t.Errorf("evict_last %v, forward %d: logits differ from off (max |diff| %g)", last, i, devtest.MaxAbsDiff(onSteps[i], offSteps[i]))
						}
					}
				}
			})
		}
	})
}
