//go:build cuda

package all_test

import (
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/runtime"
)

// aoCounter is the CUDA backend counting the AttnOProj calls that ran (the
// fused one-token attention + o_proj, FT_ATTN_OPROJ); every other op is
// the backend's own.
type aoCounter struct {
	*cudabackend.Backend
	ran int
}

func (c *aoCounter) AttnOProj(y, q, kCache, vCache, wo *runtime.Tensor, pos0 int) (bool, error) {
	ran, err := c.Backend.AttnOProj(y, q, kCache, vCache, wo, pos0)
	if ran {
		c.ran++
	}
	return ran, err
}

var _ kernels.AttnOProjer = (*aoCounter)(nil)

// TestAttnOProjModelGPU: a random 2-layer Llama of head width 128 (the tiny
// fixtures' heads are 32 wide, which the fused op declines): with
// AttnOProjFused on, every layer of every eager one-token step and of the
// captured decode step runs the fused op (the prefill never does); the
// logits of 6 eager steps are within 2% of the largest logit of those
// with it off; 16 greedy tokens, eager and replaying the graph, are those
// with it off; and replaying the graph with it on gives the eager tokens.
func TestAttnOProjModelGPU(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		gb, ok := d.Backend.(*cudabackend.Backend)
		if !ok {
			t.Skipf("the fused attention + o_proj is the CUDA backend's; %s has none", d.Name)
		}
		saved, savedCtx := gb.AttnOProjFused, gb.AttnOProjMaxCtx
		t.Cleanup(func() { gb.AttnOProjFused, gb.AttnOProjMaxCtx = saved, savedCtx })
		gb.AttnOProjMaxCtx = 1024
		m := load(t, megaCheckpoint(t, 2), d.Dev)
		L := len(m.Layers)
		be := &aoCounter{Backend: gb}
		ab := decodeAB{t: t, m: m, be: be, prompt: []int32{5, 17, 42, 3, 9}, set: func(on bool) { gb.AttnOProjFused = on }}

		off := ab.eagerLogits(false, 6)
		if be.ran != 0 {
			t.Errorf("off: %d fused ops ran", be.ran)
		}
		on := ab.eagerLogits(true, 6)
		if be.ran != L*6 {
			t.Errorf("eager: %d fused ops ran, want one a layer and step = %d", be.ran, L*6)
		}
		closeLogits(t, "eager, fused attention + o_proj on against off", on, off, 0.02)

		be.ran = 0
		ab.sameTokens("FT_ATTN_OPROJ", 16)
		if be.ran == 0 {
			t.Error("greedy decoding with the switch on: the fused op never ran")
		}
		ab.graphTokensEager("FT_ATTN_OPROJ", true, 16)
	})
}
