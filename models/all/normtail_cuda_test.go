//go:build cuda

package all_test

import (
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
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
				ab := decodeAB{t: t, m: m, be: be, prompt: []int32{5, 17, 42, 3, 9}, set: func(on bool) { gb.NormTail = on }}
				ab.sameTokens("norm tails", 20)

				// The prompt's last layer goes on past attention with its last row alone
				// (models/decoder/lastrows.go): one-row products, fused as a step's.
				off := ab.eagerLogits(false, 6)
				be.ran = 0
				on := ab.eagerLogits(true, 6)
				if be.ran != 2*L*6+2 {
					t.Errorf("eager: %d fused calls ran, want 2 a layer and step and the prompt's last layer's 2 = %d", be.ran, 2*L*6+2)
				}
				sameLogits(t, "eager, norm tails on against off", on, off)

				goff := ab.graphLogits(false, 20)
				be.ran = 0
				gon := ab.graphLogits(true, 20)
				if be.ran != 2*L+2 {
					t.Errorf("graph: %d fused calls ran in the prompt and the capture, want 2 a layer and the prompt's last layer's 2 = %d", be.ran, 2*L+2)
				}
				sameLogits(t, "graph, norm tails on against off", gon, goff)
			})
		}
	})
}
