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

// TestL2PrefetchDecodeGPU: on the tiny Llama and Qwen2 fixtures, 20 greedy
// tokens after a prompt, eager and replaying the decode graph, are the same
// with FT_L2_PREFETCH's plans "o" and "all" (Backend.L2Plan) as with it off;
// and the logits of a prefill and eager one-token steps are bit for bit
// the same: a prefetch changes no value.
func TestL2PrefetchDecodeGPU(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		gb, ok := d.Backend.(*cudabackend.Backend)
		if !ok {
			t.Skipf("the L2 prefetch is the CUDA backend's; %s has none", d.Name)
		}
		withPlan := func(p kernels.L2PrefetchPlan) (restore func()) {
			old := gb.L2Plan
			gb.L2Plan = p
			return func() { gb.L2Plan = old }
		}
		for _, dir := range []string{"../../testdata/tiny-llama", "../../testdata/tiny-qwen2"} {
			t.Run(dir[len("../../testdata/"):], func(t *testing.T) {
				m := load(t, dir, d.Dev)
				prompt := []int32{5, 17, 42, 3, 9}
				gen := func(p kernels.L2PrefetchPlan, eager bool) []int32 {
					defer withPlan(p)()
					out, err := m.Generate(d.Backend, prompt, decoder.GenerateOptions{MaxNewTokens: 20, IgnoreEOS: true, Eager: eager})
					if err != nil {
						t.Fatal(err)
					}
					return out
				}
				steps := func(p kernels.L2PrefetchPlan) [][]float32 {
					defer withPlan(p)()
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
				want, wantGraph := gen(kernels.L2PrefetchOff, true), gen(kernels.L2PrefetchOff, false)
				off := steps(kernels.L2PrefetchOff)
				for _, p := range []kernels.L2PrefetchPlan{kernels.L2PrefetchO, kernels.L2PrefetchAll} {
					if got := gen(p, true); !slices.Equal(got, want) {
						t.Errorf("plan %s, eager: tokens %v, want %v (off)", p, got, want)
					}
					if got := gen(p, false); !slices.Equal(got, wantGraph) {
						t.Errorf("plan %s, graph: tokens %v, want %v (off)", p, got, wantGraph)
					}
					on := steps(p)
					for i := range off {
						if !slices.Equal(on[i], off[i]) {
							t.Errorf("plan %s, forward %d: logits differ from the plan off (max |diff| %g)", p, i, devtest.MaxAbsDiff(on[i], off[i]))
						}
					}
				}
			})
		}
	})
}
