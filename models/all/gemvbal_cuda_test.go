//go:build cuda

package all_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
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
		defer func(was int) { gb.GEMVBal = was }(gb.GEMVBal)
		for _, dir := range []string{"../../testdata/tiny-llama", "../../testdata/tiny-qwen2", "../../testdata/tiny-qwen3", "../../testdata/tiny-mistral"} {
			t.Run(dir[len("../../testdata/"):], func(t *testing.T) {
				m := load(t, dir, d.Dev)
				prompt := []int32{5, 17, 42, 3, 9}
				split := 0 // the split mode B runs, each subtest's S
				ab := decodeAB{t: t, m: m, be: d.Backend, prompt: prompt, set: func(on bool) {
					gb.GEMVBal = 0
					if on {
						gb.GEMVBal = split
					}
				}}
				base := ab.eagerLogits(false, 6)
				for _, S := range []int{2, 4} {
					t.Run(fmt.Sprintf("bal%d", S), func(t *testing.T) {
						split = S
						ab := ab
						ab.t = t
						got := ab.eagerLogits(true, 6)
						for i := range base {
							scale := 0.0
							for _, v := range base[i] {
								scale = max(scale, math.Abs(float64(v)))
							}
							if diff := devtest.MaxAbsDiff(got[i], base[i]); !(diff <= 0.02*scale) {
								t.Errorf("forward %d: logits max |diff| %g from the pipelined GEMVs', want ≤ %g", i, diff, 0.02*scale)
							}
						}
						ab.graphTokensEager(fmt.Sprintf("bal%d", S), true, 20)
						sameLogits(t, "two captures' first step", ab.graphLogits(true, 1), ab.graphLogits(true, 1))
					})
				}
			})
		}
	})
}
