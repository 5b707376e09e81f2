package kernels

import "github.com/flextensor-go/flextensor/runtime"

// NormProjector is implemented by backends whose one-token projections can
// apply the RMSNorm in front of them themselves: instead of a normalised
// activation h they take the F32 residual stream x[1,D], the norm's weight
// nw[D] and eps, and multiply by h = RMSNorm(x)·nw with the bits the
// backend's RMSNorm(h, x, nw, eps) would write. One launch less per norm,
// and h never goes through memory.
//
// Each method reports whether it ran: false (nothing enqueued, no error)
// where the backend does not fuse these operands (not one token, an F32
// residual and BF16 weights it can take), and the caller then runs the
// RMSNorm and the unfused op.
type NormProjector interface {
	// NormMatMulN: outs[i][1,N_i] = RMSNorm(x)·ws[i]ᵀ for three weights
	// (a token's q, k and v), as MultiMatMuler.MatMulN of h.
	NormMatMulN(outs []*runtime.Tensor, x, nw *runtime.Tensor, eps float32, ws []*runtime.Tensor) (bool, error)
	// NormGateUpSiLU: out[1,I] = silu(h·wgᵀ)·(h·wuᵀ), h = RMSNorm(x), as
	// GateUpSiLUer.GateUpSiLU of h.
	NormGateUpSiLU(out, x, nw *runtime.Tensor, eps float32, wg, wu *runtime.Tensor) (bool, error)
	// NormMatMul: out[1,N] = RMSNorm(x)·wᵀ, as MatMul of h (the LM head).
	NormMatMul(out, x, nw *runtime.Tensor, eps float32, w *runtime.Tensor) (bool, error)
}

// FP8NormProjector is NormProjector for FP8 weights (per-channel or block
// scales in layout): the one-token q/k/v and gate·up·SiLU products of
// RMSNorm(x) for the F32 residual x[1,D], the norm's weight nw[D] and eps.
// Unlike NormProjector's, the results need not be the bits of RMSNorm
// followed by the FP8 op (the GPU applies the norm's 1/rms to the finished
// sums): they agree within the FP8 ops' own tolerance of the reference.
// Each method reports whether it ran, as NormProjector's.
type FP8NormProjector interface {
	// NormMatMulNFP8: outs[i][1,N_i] = RMSNorm(x)·dequant(ws[i], scales[i])ᵀ
	// for three weights (a token's q, k and v), as
	// FP8MultiMatMuler.MatMulNFP8 of h.
	NormMatMulNFP8(outs []*runtime.Tensor, x, nw *runtime.Tensor, eps float32, ws, scales []*runtime.Tensor, layout FP8Layout) (bool, error)
	// NormGateUpSiLUFP8: out[1,I] = silu(h·dequant(wg, sg)ᵀ)·(h·dequant(wu,
	// su)ᵀ), h = RMSNorm(x), as FP8GateUpSiLUer.GateUpSiLUFP8 of h.
	NormGateUpSiLUFP8(out, x, nw *runtime.Tensor, eps float32, wg, wu, sg, su *runtime.Tensor, layout FP8Layout) (bool, error)
}
