package decoder

import (
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// Residual accumulation of FP8 projections (accumulate.go): for one token
// on a backend that is a kernels.MatMulAdder and a kernels.FP8MatMulAdder
// saying AddsFP8 (the GPU unless FT_FP8_ADD=0), an FP8 o_proj or down_proj
// without bias adds its product straight into the F32 residual stream,
// exactly where a plain one takes MatMulAdd: the separate residual add
// after down_proj goes, and the fused add + post-attention norm becomes
// the plain norm of the residual. The norm tails (normtail.go) stay with
// plain weights.

// accumulableFP8 returns the backend's FP8MatMulAdder where projection p
// of rows tokens, FP8 without bias, may add into its output; nil
// otherwise.
func accumulableFP8(b kernels.Backend, p *nn.Linear, rows int) kernels.FP8MatMulAdder {
	if p.Bias != nil || p.Scale == nil {
		return nil
	}
	f, ok := b.(kernels.FP8MatMulAdder)
	if !ok || !f.AddsFP8(rows) {
		return nil
	}
	return f
}

// fp8Adder is a MatMulAdder for one FP8 projection: MatMulAdd(y, x, w)
// runs f.MatMulAddFP8 with p's scales and layout (w is p's weight).
type fp8Adder struct {
	f kernels.FP8MatMulAdder
	p *nn.Linear
}

// MatMulAdd sets y += x·dequant(w, p's scales)ᵀ.
func (a fp8Adder) MatMulAdd(y, x, w *runtime.Tensor) error {
	return a.f.MatMulAddFP8(y, x, w, a.p.Scale.Tensor(), a.p.FP8)
}
