package kernels

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// FP8QKVRoPE are the operands of FP8QKVRoPEStorer: QKVRoPE's with FP8
// weights (WQ, WK, WV F8_E4M3 with scales SQ, SK, SV in Layout) and no
// biases, and, with Norm set, the RMSNorm in front of the projections
// folded in: X is then the F32 residual [1,D] and the projections take
// RMSNorm(X)·Norm (eps Eps); without it X is the normalised input.
type FP8QKVRoPE struct {
	QKVRoPE
	SQ, SK, SV *runtime.Tensor
	Layout     FP8Layout
	Norm       *runtime.Tensor // the RMSNorm's weight [D], or nil
	Eps        float32
}

// FP8QKVRoPEStorer is implemented by backends that run a one-token step's
// FP8 q/k/v projections (of the normalised input, or with the norm folded
// in), RoPE and KV-cache store as one op (the CUDA backend: the
// tensor-core FP8 GEMV with the rest in its epilogue).
type FP8QKVRoPEStorer interface {
	// ProjectRoPEStoreKVFP8 leaves in a.Q, a.K, a.V, a.KCache and
	// a.VCache the values of ProjectRoPEStoreKVFP8Ref, within the FP8
	// GEMVs' tolerance (the GPU: the bits of its own FP8 GEMV, folded
	// norm included, followed by its RoPE and store). ran false: the
	// backend declines these operands (or has the fusion switched off)
	// and did nothing; the caller runs the separate ops.
	ProjectRoPEStoreKVFP8(a FP8QKVRoPE) (ran bool, err error)
}

// Check validates a's shapes (QKVRoPE.Check), that it has no biases, and
// its norm weight's length. It returns H, KV and d.
func (a FP8QKVRoPE) Check() (H, KV, d int, err error) {
	if H, KV, d, err = a.QKVRoPE.Check(); err != nil {
		return 0, 0, 0, err
	}
	if a.BQ != nil || a.BK != nil || a.BV != nil {
		return 0, 0, 0, fmt.Errorf("kernels.ProjectRoPEStoreKVFP8: biases are not taken")
	}
	if a.SQ == nil || a.SK == nil || a.SV == nil {
		return 0, 0, 0, fmt.Errorf("kernels.ProjectRoPEStoreKVFP8: a scale is nil (q %v, k %v, v %v)", a.SQ != nil, a.SK != nil, a.SV != nil)
	}
	if a.Norm != nil && a.Norm.NumElements() != a.X.Dim(-1) {
		return 0, 0, 0, fmt.Errorf("kernels.ProjectRoPEStoreKVFP8: norm weight %v for x %v", a.Norm.Shape(), a.X.Shape())
	}
	return H, KV, d, nil
}

// ProjectRoPEStoreKVFP8Ref is ProjectRoPEStoreKVFP8 by b's separate ops:
// RMSNorm into a scratch when a.Norm is set, MatMulFP8 for each
// projection, RoPE of q and k at Pos, and StoreKV of k and v at row Pos.
func ProjectRoPEStoreKVFP8Ref(b Backend, a FP8QKVRoPE) error {
	if _, _, _, err := a.Check(); err != nil {
		return err
	}
	x := a.X
	if a.Norm != nil {
		h, err := runtime.NewTensor(b.Device(), b.ActDType(), a.X.Shape(), "normalised q/k/v input")
		if err != nil {
			return err
		}
		defer h.Buffer().Free()
		if err := b.RMSNorm(h, a.X, a.Norm, a.Eps); err != nil {
			return err
		}
		x = h
	}
	for _, p := range []struct{ out, w, s *runtime.Tensor }{{a.Q, a.WQ, a.SQ}, {a.K, a.WK, a.SK}, {a.V, a.WV, a.SV}} {
		rows, err := p.out.Reshape(1, p.w.Dim(0))
		if err != nil {
			return err
		}
		if err := MatMulFP8(b, rows, x, p.w, p.s, a.Layout); err != nil {
			return err
		}
	}
	return ropeStoreRef(b, a.Q, a.K, a.V, a.KCache, a.VCache, a.Pos, a.InvFreq)
}
