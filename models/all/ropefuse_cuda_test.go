//go:build cuda

package all_test

import (
	"math"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestFusedRoPEDecodeGPU: on the Llama, Qwen2 (biases), Mistral and Qwen3
// (q/k norms: never fused) fixtures, 20 greedy tokens after a prompt,
// eager and replaying the decode graph, are the same with the q/k/v GEMV
// carrying RoPE and the KV store (FT_FUSE_ROPE) as without, and the logits
// of a prefill and 6 eager one-token steps are bit for bit the same; the
// backend takes the fixtures' q/k/v operands (the fused kernel does run).
func TestFusedRoPEDecodeGPU(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		gb, ok := d.Backend.(*cudabackend.Backend)
		if !ok {
			t.Skipf("the fused q/k/v + RoPE kernel is the CUDA backend's; %s has none", d.Name)
		}
		saved := gb.NoFusedRoPE
		defer func() { gb.NoFusedRoPE = saved }()
		for _, dir := range []string{"../../testdata/tiny-llama", "../../testdata/tiny-qwen2", "../../testdata/tiny-mistral", "../../testdata/tiny-qwen3"} {
			t.Run(dir[len("../../testdata/"):], func(t *testing.T) {
				m := load(t, dir, d.Dev)
				ab := decodeAB{t: t, m: m, be: d.Backend, prompt: []int32{5, 17, 42, 3, 9}, set: func(on bool) { gb.NoFusedRoPE = !on }}
				ab.sameTokens("FT_FUSE_ROPE", 20)
				sameLogits(t, "eager, FT_FUSE_ROPE on against off", ab.eagerLogits(true, 6), ab.eagerLogits(false, 6))

				// The fused kernel takes this fixture's operands.
				gb.NoFusedRoPE = false
				a := m.Layers[0].Attn
				cfg := m.Cfg
				tensor := func(shape ...int) *runtime.Tensor {
					x, err := runtime.NewTensor(d.Dev, runtime.BF16, shape, "test")
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(x.Buffer().Free)
					return x
				}
				inv := make([]float32, cfg.HeadDim/2)
				for i := range inv {
					inv[i] = float32(math.Pow(10000, -float64(2*i)/float64(cfg.HeadDim)))
				}
				op := kernels.QKVRoPE{Q: tensor(1, cfg.NumAttentionHeads, cfg.HeadDim), K: tensor(1, cfg.NumKeyValueHeads, cfg.HeadDim),
					V: tensor(1, cfg.NumKeyValueHeads, cfg.HeadDim), X: tensor(1, cfg.HiddenSize),
					WQ: a.Q.Weight.Tensor(), WK: a.K.Weight.Tensor(), WV: a.V.Weight.Tensor(),
					KCache: tensor(4, cfg.NumKeyValueHeads, cfg.HeadDim), VCache: tensor(4, cfg.NumKeyValueHeads, cfg.HeadDim), Pos: 2, InvFreq: inv}
				if a.Q.Bias != nil {
					op.BQ, op.BK, op.BV = a.Q.Bias.Tensor(), a.K.Bias.Tensor(), a.V.Bias.Tensor()
				}
				if ran, err := gb.ProjectRoPEStoreKV(op); err != nil || !ran {
					t.Errorf("the fixture's q/k/v operands: ran %v, %v; want the fused kernel", ran, err)
				}
			})
		}
	})
}
