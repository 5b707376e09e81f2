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
