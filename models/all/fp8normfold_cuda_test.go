//go:build cuda

package all_test

import (
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/runtime"
)

// fp8NormCounter is the CUDA backend counting the folded-norm FP8 GEMVs
// that ran (kernels.FP8NormProjector calls that did not decline); every
// op is the backend's own.
type fp8NormCounter struct {
	*cudabackend.Backend
	qkv, gateUp int
}

func (c *fp8NormCounter) NormMatMulNFP8(outs []*runtime.Tensor, x, nw *runtime.Tensor, eps float32, ws, scales []*runtime.Tensor, layout kernels.FP8Layout) (bool, error) {
	ran, err := c.Backend.NormMatMulNFP8(outs, x, nw, eps, ws, scales, layout)
	if ran {
		c.qkv++
	}
	return ran, err
}

func (c *fp8NormCounter) NormGateUpSiLUFP8(out, x, nw *runtime.Tensor, eps float32, wg, wu, sg, su *runtime.Tensor, layout kernels.FP8Layout) (bool, error) {
	ran, err := c.Backend.NormGateUpSiLUFP8(out, x, nw, eps, wg, wu, sg, su, layout)
	if ran {
		c.gateUp++
	}
	return ran, err
}

var _ kernels.FP8NormProjector = (*fp8NormCounter)(nil)

// TestFP8FoldedNormsDecodeGPU: on both FP8 fixtures (per channel,
// 64-blocks) the decode steps with the RMSNorms folded into the FP8 q/k/v
// and gate·up GEMVs (the default) give the greedy tokens of the unfolded
// steps (NoFP8FusedNorm, FT_FP8_FUSE_NORM=0), eager and replaying the
// captured graph, and logits within 2% of each row's largest (the folded
// kernels apply 1/rms to their sums and stage x·w in f16 where the norm
// writes bf16: close, not the same bits); on, every layer's two norms
// folded in each eager one-token step and in the capture, off, none. With
// FT_FP8_VARIANT=u8r1s (scalar kernels, no folded twins) the ops decline
// and the steps are the unfolded ones bit for bit.
func TestFP8FoldedNormsDecodeGPU(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		gb, ok := d.Backend.(*cudabackend.Backend)
		if !ok {
			t.Skipf("the folded-norm FP8 GEMVs are the CUDA backend's; %s has none", d.Name)
		}
		savedFold, savedVariant := gb.NoFP8FusedNorm, gb.FP8Variant
		defer func() { gb.NoFP8FusedNorm, gb.FP8Variant = savedFold, savedVariant }()
		be := &fp8NormCounter{Backend: gb}
		for _, dir := range fp8FixtureDirs {
			t.Run(dir[len("../../testdata/"):], func(t *testing.T) {
				gb.FP8Variant = "auto"
				m := load(t, dir, d.Dev)
				L := len(m.Layers)
				prompt := []int32{1, 15043, 29892, 590, 1024}
				for i := range prompt {
					prompt[i] %= int32(m.Cfg.VocabSize)
				}
				ab := decodeAB{t: t, m: m, be: be, prompt: prompt, set: func(on bool) { gb.NoFP8FusedNorm = !on }}
				ab.sameTokens("FP8 folded norms", 16)
				counts := func(what string, qkv, gateUp int) {
					t.Helper()
					if be.qkv != qkv || be.gateUp != gateUp {
						t.Errorf("%s: %d folded q/k/v and %d gate·up GEMVs, want %d and %d", what, be.qkv, be.gateUp, qkv, gateUp)
					}
					be.qkv, be.gateUp = 0, 0
				}
				// The prompt's last layer goes on past attention with its last row alone
				// (models/decoder/lastrows.go): one-row products, fused as a step's.
				be.qkv, be.gateUp = 0, 0
				off := ab.eagerLogits(false, 6)
				counts("eager, off", 0, 0)
				on := ab.eagerLogits(true, 6)
				counts("eager, on", 6*L, 6*L+1)
				closeLogits(t, "eager, folded against not", on, off, 0.02)
				goff := ab.graphLogits(false, 16)
				counts("graph, off", 0, 0)
				gon := ab.graphLogits(true, 16)
				counts("graph, on (the prompt's last layer and the capture)", L, L+1)
				closeLogits(t, "graph, folded against not", gon, goff, 0.02)

				gb.FP8Variant = "u8r1s"
				scalar := ab.eagerLogits(true, 6)
				counts("eager, on, u8r1s", 0, 0)
				sameLogits(t, "eager, on, u8r1s against off", scalar, ab.eagerLogits(false, 6))
			})
		}
	})
}
