package all_test

import (
	"testing"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// countingFP8 is the CPU backend with its fused FP8 ops counted.
type countingFP8 struct {
	*kernels.CPUBackend
	qkv, gateUp int
}

func (c *countingFP8) MatMulNFP8(outs []*runtime.Tensor, x *runtime.Tensor, ws, scales []*runtime.Tensor, layout kernels.FP8Layout) error {
	c.qkv++
	return c.CPUBackend.MatMulNFP8(outs, x, ws, scales, layout)
}

func (c *countingFP8) GateUpSiLUFP8(out, up, x, wg, wu, sg, su *runtime.Tensor, layout kernels.FP8Layout) error {
	c.gateUp++
	return c.CPUBackend.GateUpSiLUFP8(out, up, x, wg, wu, sg, su, layout)
}

// unfusedFP8 is a backend without the fused FP8 ops (nor any other
// optional op but MatMulFP8).
type unfusedFP8 struct {
	kernels.Backend
	kernels.FP8MatMuler
}

// TestFP8FusedDecode: a one-token step of an FP8 model runs its q, k, v
// projections as one FP8MultiMatMuler op and gate·up·SiLU as one
// FP8GateUpSiLUer op per layer (a prefill runs neither, but for the MLP of
// its last layer, which goes on past attention with the last row alone:
// models/decoder/lastrows.go), and the steps' logits are those of the
// unfused ops, both layouts.
func TestFP8FusedDecode(t *testing.T) {
	for _, fx := range fp8Fixtures {
		t.Run(fx.layout, func(t *testing.T) {
			ref := readFP8Reference(t, fx.dir)
			host := runtime.NewCPU(0)
			defer host.Close()
			cb, err := kernels.NewCPUBackend(host)
			if err != nil {
				t.Fatal(err)
			}
			m := load(t, fx.dir, host)
			L, steps := m.Cfg.NumHiddenLayers, 4
			run := func(b kernels.Backend) [][]float32 {
				cache, err := m.NewKVCache(b, len(ref.GreedyPrompt)+steps)
				if err != nil {
					t.Fatal(err)
				}
				defer cache.Free()
				out, err := testmodel.Steps(m, b, cache, ref.GreedyPrompt, steps, func(s int, _ []float32) int32 { return ref.GreedyContinuation[s] })
				if err != nil {
					t.Fatal(err)
				}
				return out
			}
			counted := &countingFP8{CPUBackend: cb}
			fused := run(counted)
			if counted.qkv != steps*L || counted.gateUp != steps*L+1 {
				t.Errorf("%d fused q/k/v and %d fused gate·up ops over %d steps of %d layers, want %d and %d (and the prefill's last layer's)",
					counted.qkv, counted.gateUp, steps, L, steps*L, steps*L+1)
			}
			plain := run(unfusedFP8{cb, cb})
			for s := range fused {
				if d := maxDiff(fused[s], plain[s]); d > 1e-5 {
					t.Errorf("forward %d: fused and unfused logits differ by %g", s, d)
				}
			}
		})
	}
}
