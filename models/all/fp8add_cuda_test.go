//go:build cuda

package all_test

import (
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/runtime"
)

// fp8AddCounter is the CUDA backend counting its MatMulAddFP8 calls (the
// FP8 o_proj and down_proj adding into the residual stream, FT_FP8_ADD):
// every op is the backend's own.
type fp8AddCounter struct {
	*cudabackend.Backend
	calls int
}

func (c *fp8AddCounter) MatMulAddFP8(y, x, w, scale *runtime.Tensor, layout kernels.FP8Layout) error {
	c.calls++
	return c.Backend.MatMulAddFP8(y, x, w, scale, layout)
}

var _ kernels.FP8MatMulAdder = (*fp8AddCounter)(nil)

// TestFP8AddDecodeGPU: on both FP8 fixtures (per channel, 64-blocks), 16
// greedy tokens after a prompt, eager and replaying the decode graph, are
// the same with the adding FP8 GEMV on (o_proj and down_proj add into the
// residual stream; no add_f32 after down, the post-attention norm plain)
// as off (NoFP8Add, FT_FP8_ADD=0); the logits of 6 eager steps and of 16
// graph replays are bit for bit the same (the GEMV adds exactly as add_f32
// did, and add_rmsnorm_f32_bf16 sums as add_f32 then rmsnorm_f32in_bf16);
// and on, both projections of every layer ran through MatMulAddFP8 (2 a
// layer per eager one-token step, 2 a layer in the captured step), off,
// none did. All of it with FT_FP8_VARIANT=auto (the default) and u8r1s,
// whose tokens are the same and logits (the 6 eager steps, the 16 graph
// replays, add off) within 2% of each row's largest: auto runs the
// tensor-core kernels (mm4 for o and down, mm2 for q/k/v and gate·up),
// which sum in another order than the scalar u8r1s. The FP8 GEMVs'
// folded norms are off here (NoFP8FusedNorm): with the add off the
// post-attention norm is not folded, with it on it would be
// (TestFP8FoldedNormsDecodeGPU checks the folding).
func TestFP8AddDecodeGPU(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		gb, ok := d.Backend.(*cudabackend.Backend)
		if !ok {
			t.Skipf("the adding FP8 GEMV is the CUDA backend's; %s has none", d.Name)
		}
		saved, savedVariant, savedFold := gb.NoFP8Add, gb.FP8Variant, gb.NoFP8FusedNorm
		defer func() { gb.NoFP8Add, gb.FP8Variant, gb.NoFP8FusedNorm = saved, savedVariant, savedFold }()
		gb.NoFP8FusedNorm = true
		be := &fp8AddCounter{Backend: gb}
		for _, dir := range fp8FixtureDirs {
			// The tokens of "auto" (a variant per kind and width, the
			// default: the tensor-core kernels) and of the scalar u8r1s
			// everywhere (FT_FP8_VARIANT=u8r1s) are the same, their
			// logits close.
			var first []int32
			var firstEager, firstGraph [][]float32 // auto's logits, add off
			for _, variant := range []string{"auto", "u8r1s"} {
				t.Run(dir[len("../../testdata/"):]+"/"+variant, func(t *testing.T) {
					gb.FP8Variant = variant
					m := load(t, dir, d.Dev)
					L := len(m.Layers)
					prompt := []int32{1, 15043, 29892, 590, 1024}
					for i := range prompt {
						prompt[i] %= int32(m.Cfg.VocabSize)
					}
					ab := decodeAB{t: t, m: m, be: be, prompt: prompt, set: func(on bool) { gb.NoFP8Add = !on }}
					want := ab.sameTokens("FP8 add", 16)
					if first == nil {
						first = want
					} else if !slices.Equal(want, first) {
						t.Errorf("FT_FP8_VARIANT=%s: tokens %v, want %v (auto's)", variant, want, first)
					}

					// The prompt's last layer goes on past attention with its last row alone
					// (models/decoder/lastrows.go): one-row products, fused as a step's.
					be.calls = 0
					off := ab.eagerLogits(false, 6)
					if be.calls != 0 {
						t.Errorf("eager, off: %d MatMulAddFP8 calls, want 0", be.calls)
					}
					on := ab.eagerLogits(true, 6)
					if be.calls != 2*L*6+2 {
						t.Errorf("eager: %d MatMulAddFP8 calls, want 2 a layer and one-token step and the prompt's last layer's 2 = %d", be.calls, 2*L*6+2)
					}
					if firstEager == nil {
						firstEager = off
					} else {
						closeLogits(t, "FT_FP8_VARIANT="+variant+", eager, against auto's", off, firstEager, 0.02)
					}
					sameLogits(t, "eager, FP8 add on against off", on, off)

					goff := ab.graphLogits(false, 16)
					if firstGraph == nil {
						firstGraph = goff
					} else {
						closeLogits(t, "FT_FP8_VARIANT="+variant+", graph, against auto's", goff, firstGraph, 0.02)
					}
					be.calls = 0
					gon := ab.graphLogits(true, 16)
					if be.calls != 2*L+2 {
						t.Errorf("graph: %d MatMulAddFP8 calls in the prompt and the capture, want 2 a layer and the prompt's last layer's 2 = %d", be.calls, 2*L+2)
					}
					sameLogits(t, "graph, FP8 add on against off", gon, goff)
				})
			}
		}
	})
}
