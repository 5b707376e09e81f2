package decoder

import (
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// The fused FP8 MLP: on a backend with kernels.FP8MLPer that takes the
// rows (the GPU's prefill with per-channel FP8 weights, unless
// FT_FP8_FUSE=0), an MLP whose gate, up and down are FP8 Linears without
// biases, none watched by a hook, runs as one MLPFP8 call: the SiLU·up
// intermediate stays quantized on the device. Where, in addition, the
// down projection could add into the residual stream (the conditions of
// Layer.accumulators: no tensor parallelism, not NoResidualAccumulate, a
// dense layer, the MLP and its down projection unwatched) MLPFP8 adds its
// output into x itself and the residual add disappears. Otherwise the
// decoder runs gate, up, SiLU·up and down as before (gateUp, Down.Forward).
// Decode (one token) never takes it: FusesFP8MLP says no for one row.

// fp8Fused returns the backend's FP8MLPer where the MLP of rows tokens runs
// as one MLPFP8 call, else nil.
func (p *MLP) fp8Fused(b kernels.Backend, rows int) kernels.FP8MLPer {
	f, ok := b.(kernels.FP8MLPer)
	if !ok || rows < 2 || !allFP8(p.Gate, p.Up, p.Down) || !nn.Unwatched(p.Gate, p.Up, p.Down) {
		return nil
	}
	for _, l := range []*nn.Linear{p.Gate, p.Up, p.Down} {
		if l.Bias != nil {
			return nil
		}
	}
	if !f.FusesFP8MLP(rows, p.Gate.FP8) {
		return nil
	}
	return f
}

// fp8Weights are the MLP's FP8 weights for MLPFP8.
func (p *MLP) fp8Weights() kernels.FP8MLP {
	return kernels.FP8MLP{
		Gate: p.Gate.Weight.Tensor(), Up: p.Up.Weight.Tensor(), Down: p.Down.Weight.Tensor(),
		GateScale: p.Gate.Scale.Tensor(), UpScale: p.Up.Scale.Tensor(), DownScale: p.Down.Scale.Tensor(),
		Layout: p.Gate.FP8,
	}
}

// fp8Accumulator returns the backend's FP8MLPer where the layer's MLP of
// rows tokens runs fused and adds into the residual stream (see above),
// else nil.
func (l *Layer) fp8Accumulator(b kernels.Backend, m *Model, rows int) kernels.FP8MLPer {
	if m.tp != nil || m.NoResidualAccumulate || l.MLP == nil || l.MoE != nil || !nn.Unwatched(l.MLP, l.MLP.Down) {
		return nil
	}
	return l.MLP.fp8Fused(b, rows)
}

// forwardFP8Add is the MLP's forward that adds into the residual stream:
// x += down(silu(gate(h))·up(h)) through f's MLPFP8 (from fp8Accumulator),
// tmp an F32 scratch of x's shape.
func (p *MLP) forwardFP8Add(b kernels.Backend, f kernels.FP8MLPer, w *workspace, x, h, tmp *runtime.Tensor) error {
	T := h.Dim(0)
	return nn.Call(p, func() error {
		g, u := rows(w.gate, T), rows(w.up, T)
		return f.MLPFP8(x, h, g, u, tmp, p.fp8Weights(), true)
	})
}
