package decoder

import (
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// Residual accumulation: on a backend with kernels.MatMulAdder, a layer's
// o_proj and down_proj add their products straight into the F32 residual
// stream x (x += O·att, x += Down·act) instead of writing the scratch o
// that a residual add (or the fused add + post-attention norm) then reads:
// the add disappears and the post-attention norm is a plain RMSNorm of x.
// The values are those of the product then the add (MatMulAdder's
// contract). It is decided per layer and per projection, and applies only
// where nothing can tell the difference: no tensor parallelism (a shard's
// partial product must be all-reduced before it is added), a plain weight
// without bias, and no installed hook watching the projection or the
// module that owns it (a hook would see out hold x + o instead of o). CPU
// backends do not implement it: they keep the product-then-add path, which
// is the reference.

//
// FP8 projections (fp8add.go) add the same way on a backend that is also a
// kernels.FP8MatMulAdder and takes rows tokens (AddsFP8: the GPU, one
// token, unless FT_FP8_ADD=0).

// accumulators returns the backend's MatMulAdder for the attention's output
// projection and for the MLP's down projection of rows tokens where each
// may add into the residual stream, nil where it may not.
func (l *Layer) accumulators(b kernels.Backend, m *Model, rows int) (attn, mlp kernels.MatMulAdder) {
	f, ok := b.(kernels.MatMulAdder)
	if !ok || m.tp != nil || m.NoResidualAccumulate {
		return nil, nil
	}
	if nn.Unwatched(l.Attn, l.Attn.O) {
		attn = adderFor(b, f, l.Attn.O, rows)
	}
	if l.MLP != nil && l.MoE == nil && nn.Unwatched(l.MLP, l.MLP.Down) {
		mlp = adderFor(b, f, l.MLP.Down, rows)
	}
	return attn, mlp
}

// adderFor is how projection p of rows tokens adds into its output: f for
// a plain weight without bias, an fp8Adder for an FP8 weight without bias
// where the backend takes it (accumulableFP8), nil otherwise.
func adderFor(b kernels.Backend, f kernels.MatMulAdder, p *nn.Linear, rows int) kernels.MatMulAdder {
	if accumulable(p) {
		return f
	}
	if fa := accumulableFP8(b, p, rows); fa != nil {
		return fp8Adder{f: fa, p: p}
	}
	return nil
}

// accumulable reports whether a projection may add into its output: a
// plain (not quantized) weight and no bias.
func accumulable(p *nn.Linear) bool { return p.Bias == nil && plain(p) }

// output applies the output projection to att: out = O·att (+ bias)
// through O's forward, or with acc, out += O·att.
//
// Tried and removed (s12a, H200 2026-12-02): one token's decode attention
// fused with this residual-adding o_proj in one kernel (FT_ATTN_OPROJ),
// each block computing its KV head's whole attention before its W_o rows'
// product. The graph step at context 512 took 4.65–4.67 ms against
// 4.27–4.28 (run-model 4.34 against 4.22 ms a token): the attention,
// redone by the 16 row chunks of a head, lengthened the step's latency
// chain instead of hiding under the W_o stream.
func (a *Attention) output(b kernels.Backend, out, att *runtime.Tensor, acc kernels.MatMulAdder) error {
	if acc != nil {
		return acc.MatMulAdd(out, att, a.O.Weight.Tensor())
	}
	return a.O.Forward(b, out, att)
}

// residualViaNorm returns the backend's kernels.ResidualNormer where a
// forward of T tokens should write its output projection in bf16 and add
// it to the residual in the post-attention norm (an A/B path for long
// prefills: the o_proj GEMM then has no fp32 epilogue): only where the
// projection may accumulate at all (acc, from accumulators), the layer has
// an MLP whose input that norm makes, and no hook watches the norm. nil
// otherwise.
func (l *Layer) residualViaNorm(b kernels.Backend, T int, acc kernels.MatMulAdder) kernels.ResidualNormer {
	f, ok := b.(kernels.ResidualNormer)
	if !ok || acc == nil || l.MLP == nil || l.PostNorm == nil || !nn.Unwatched(l.PostNorm) || !f.ResidualViaNorm(T, l.PostNorm.Dim) {
		return nil
	}
	return f
}
