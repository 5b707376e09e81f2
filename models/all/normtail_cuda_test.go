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
	"github.com/flextensor-go/flextensor/runtime"
)

// tailCounter is the CUDA backend counting the MatMulAddNorm calls that ran
// (the norm tails, FT_NORM_TAIL): every other op is the backend's own.
type tailCounter struct {
	*cudabackend.Backend
	ran int
}

func (c *tailCounter) MatMulAddNorm(y, x, w, out, nw *runtime.Tensor, eps float32) (bool, error) {
	ran, err := c.Backend.MatMulAddNorm(y, x, w, out, nw, eps)
	if ran {
		c.ran++
	}
	return ran, err
}

var _ kernels.MatMulAddNormer = (*tailCounter)(nil)

// TestNormTailDecodeGPU: on the Llama, Qwen2, Qwen3 and Mistral fixtures,
// 20 greedy tokens after a prompt, eager and replaying the decode graph,
// are the same with the norm tails on (NormTail: o_proj and down_proj
// leave the RMSNorm after them, one launch less per norm) as off; the
// logits of eager steps and of 20 graph replays are bit for bit the same;
// and on, every layer's two projections did run fused (2 a layer per eager
// one-token step, 2 a layer in the one captured step).
func TestNormTailDecodeGPU(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		gb, ok := d.Backend.(*cudabackend.Backend)
		if !ok {
			t.Skipf("the norm tails are the CUDA backend's; %s has none", d.Name)
		}
		saved := gb.NormTail
		defer func() { gb.NormTail = saved }()
		be := &tailCounter{Backend: gb}
		for _, dir := range []string{"../../testdata/tiny-llama", "../../testdata/tiny-qwen2", "../../testdata/tiny-qwen3", "../../testdata/tiny-mistral"} {
			t.Run(dir[len("../../testdata/"):], func(t *testing.T) {
				m := load(t, dir, d.Dev)
				L := len(m.Layers)
				prompt := []int32{5, 17, 42, 3, 9}
				gen := func(on, eager bool) []int32 {
					gb.NormTail = on
					out, err := m.Generate(be, prompt, decoder.GenerateOptions{MaxNewTokens: 20, IgnoreEOS: true, Eager: eager})
					if err != nil {
						t.Fatal(err)
					}
					return out
				}
				want := gen(false, true)
				for _, c := range []struct{ on, eager bool }{{true, true}, {true, false}, {false, false}} {
					if got := gen(c.on, c.eager); !slices.Equal(got, want) {
						t.Errorf("norm tails %v, eager %v: tokens %v, want %v (off, eager)", c.on, c.eager, got, want)
					}
				}

				eager := func(on bool) [][]float32 {
					gb.NormTail = on
					cache, err := m.NewKVCache(be, 32)
					if err != nil {
						t.Fatal(err)
					}
					defer cache.Free()
					out, err := testmodel.Steps(m, be, cache, prompt, 6, func(s int, _ []float32) int32 { return int32(11 + s) })
					if err != nil {
						t.Fatal(err)
					}
					return out
				}
				off := eager(false)
				be.ran = 0
				on := eager(true)
				if be.ran != 2*L*6 {
					t.Errorf("eager: %d fused calls ran, want 2 a layer and step = %d", be.ran, 2*L*6)
				}
				for i := range off {
					if !slices.Equal(on[i], off[i]) {
						t.Errorf("eager forward %d: logits with the norm tails differ (max |diff| %g)", i, devtest.MaxAbsDiff(on[i], off[i]))
					}
				}

				graph := func(on bool) [][]float32 {
					gb.NormTail = on
					return graphStepLogits(t, m, be, prompt, 20)
				}
				goff := graph(false)
				be.ran = 0
				gon := graph(true)
				if be.ran != 2*L {
					t.Errorf("graph: %d fused calls ran in the capture, want 2 a layer = %d", be.ran, 2*L)
				}
				for i := range goff {
					if !slices.Equal(gon[i], goff[i]) {
						t.Errorf("graph step %d: logits with the norm tails differ (max |diff| %g)", i, devtest.MaxAbsDiff(gon[i], goff[i]))
					}
				}
			})
		}
	})
}
