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
// and the FP8 q/k/v GEMVs with RoPE that ran (kernels.FP8NormProjector and
// kernels.FP8QKVRoPEStorer calls that did not decline); every op is the
// backend's own.
type fp8NormCounter struct {
	*cudabackend.Backend
	qkv, gateUp, rope int
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

func (c *fp8NormCounter) ProjectRoPEStoreKVFP8(a kernels.FP8QKVRoPE) (bool, error) {
	ran, err := c.Backend.ProjectRoPEStoreKVFP8(a)
	if ran {
		c.rope++
	}
	return ran, err
}

var (
	_ kernels.FP8NormProjector = (*fp8NormCounter)(nil)
	_ kernels.FP8QKVRoPEStorer = (*fp8NormCounter)(nil)
)

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
		savedFold, savedVariant, savedRoPE := gb.NoFP8FusedNorm, gb.FP8Variant, gb.NoFP8FusedRoPE
		defer func() { gb.NoFP8FusedNorm, gb.FP8Variant, gb.NoFP8FusedRoPE = savedFold, savedVariant, savedRoPE }()
		gb.NoFP8FusedRoPE = true // the q/k/v GEMV apart from RoPE: TestFP8RoPEFusedDecodeGPU checks the fused one
		be := &fp8NormCounter{Backend: gb}
		for _, dir := range []string{"../../testdata/tiny-llama-fp8-channel", "../../testdata/tiny-llama-fp8-block"} {
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
				be.qkv, be.gateUp = 0, 0
				off := ab.eagerLogits(false, 6)
				counts("eager, off", 0, 0)
				on := ab.eagerLogits(true, 6)
				counts("eager, on", 6*L, 6*L)
				closeLogits(t, "eager, folded against not", on, off, 0.02)
				goff := ab.graphLogits(false, 16)
				counts("graph, off", 0, 0)
				gon := ab.graphLogits(true, 16)
				counts("graph, on (the capture)", L, L)
				closeLogits(t, "graph, folded against not", gon, goff, 0.02)

				gb.FP8Variant = "u8r1s"
				scalar := ab.eagerLogits(true, 6)
				counts("eager, on, u8r1s", 0, 0)
				sameLogits(t, "eager, on, u8r1s against off", scalar, ab.eagerLogits(false, 6))
			})
		}
	})
}

// TestFP8RoPEFusedDecodeGPU: on both FP8 fixtures the decode steps with
// each layer's q/k/v GEMV, RoPE and KV store as one launch
// (gemv3_fp8_rope_norm_mm2, the default; the input norm folded in as well)
// give the tokens and, bit for bit, the logits of the steps with the
// folded q/k/v GEMV and rope_store_bf16 apart (NoFP8FusedRoPE,
// FT_FP8_FUSE_ROPE=0), eager and replaying the captured graph; on, one
// fused call a layer in each eager step and in the capture, off, none.
func TestFP8RoPEFusedDecodeGPU(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		gb, ok := d.Backend.(*cudabackend.Backend)
		if !ok {
			t.Skipf("the fused FP8 q/k/v and RoPE is the CUDA backend's; %s has none", d.Name)
		}
		savedRoPE := gb.NoFP8FusedRoPE
		defer func() { gb.NoFP8FusedRoPE = savedRoPE }()
		be := &fp8NormCounter{Backend: gb}
		for _, dir := range []string{"../../testdata/tiny-llama-fp8-channel", "../../testdata/tiny-llama-fp8-block"} {
			t.Run(dir[len("../../testdata/"):], func(t *testing.T) {
				m := load(t, dir, d.Dev)
				L := len(m.Layers)
				prompt := []int32{1, 15043, 29892, 590, 1024}
				for i := range prompt {
					prompt[i] %= int32(m.Cfg.VocabSize)
				}
				ab := decodeAB{t: t, m: m, be: be, prompt: prompt, set: func(on bool) { gb.NoFP8FusedRoPE = !on }}
				ab.sameTokens("FP8 q/k/v with RoPE", 16)
				be.rope = 0
				off := ab.eagerLogits(false, 6)
				if be.rope != 0 {
					t.Errorf("eager, off: %d fused calls, want 0", be.rope)
				}
				on := ab.eagerLogits(true, 6)
				if be.rope != 6*L {
					t.Errorf("eager, on: %d fused calls, want %d", be.rope, 6*L)
				}
				sameLogits(t, "eager, fused against not", on, off)
				goff := ab.graphLogits(false, 16)
				be.rope = 0
				gon := ab.graphLogits(true, 16)
				if be.rope != L {
					t.Errorf("graph: %d fused calls in the capture, want %d", be.rope, L)
				}
				sameLogits(t, "graph, fused against not", gon, goff)
			})
		}
	})
}
