//go:build cuda

package all_test

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/models/decoder"
)

// TestGEMVBalDecodeGPU: on every family fixture with the split-K one-token
// GEMVs (FT_GEMV=bal2, bal4: GEMVBal 2, 4), 20 greedy tokens after a
// prompt are the same eager as replaying the captured decode graph, and
// the first graph step's logits match it bit for bit on a second capture
// (the split-K sums are deterministic); the logits of eager one-token
// steps on fixed tokens agree with the default pipelined GEMVs' to within
// 2% of the largest logit (the split-K kernels add each row's segments in
// another order, and the bf16 activations round the difference on).
func TestGEMVBalDecodeGPU(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		gb, ok := d.Backend.(*cudabackend.Backend)
		if !ok {
			t.Skipf("the split-K GEMVs are the CUDA backend's; %s has none", d.Name)
		}
		for _, dir := range []string{"../../testdata/tiny-llama", "../../testdata/tiny-qwen2", "../../testdata/tiny-qwen3", "../../testdata/tiny-mistral"} {
			t.Run(dir[len("../../testdata/"):], func(t *testing.T) {
				m := load(t, dir, d.Dev)
				prompt := []int32{5, 17, 42, 3, 9}
				steps := func(split int) [][]float32 {
					was := gb.GEMVBal
					gb.GEMVBal = split
					defer func() { gb.GEMVBal = was }()
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
				base := steps(0)
				for _, S := range []int{2, 4} {
					t.Run(fmt.Sprintf("bal%d", S), func(t *testing.T) {
						got := steps(S)
						for i := range base {
							scale := 0.0
							for _, v := range base[i] {
								scale = max(scale, math.Abs(float64(v)))
							}
							if diff := devtest.MaxAbsDiff(got[i], base[i]); !(diff <= 0.02*scale) {
								t.Errorf("forward %d: logits max |diff| %g from the pipelined GEMVs', want ≤ %g", i, diff, 0.02*scale)
							}
						}
						was := gb.GEMVBal
						gb.GEMVBal = S
						defer func() { gb.GEMVBal = was }()
						gen := func(eager bool) []int32 {
							out, err := m.Generate(d.Backend, prompt, decoder.GenerateOptions{MaxNewTokens: 20, IgnoreEOS: true, Eager: eager})
							if err != nil {
								t.Fatal(err)
							}
							return out
						}
						if eager, graph := gen(true), gen(false); !slices.Equal(graph, eager) {
							t.Errorf("graph replay: tokens %v, eager %v", graph, eager)
						}
						a, b := graphStepLogits(t, m, d.Backend, prompt, 1), graphStepLogits(t, m, d.Backend, prompt, 1)
						if !slices.Equal(a[0], b[0]) {
							t.Errorf("two captures' first step logits differ (max |diff| %g)", devtest.MaxAbsDiff(a[0], b[0]))
						}
					})
				}
			})
		}
	})
}
