package decoder

import (
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// projectRoPE computes q, k and v from the input in, normalises q and k
// per head where the layer has q/k norms, rotates them and appends k and v
// to the cache. For one token it is one op where the backend fuses the
// projections with the rest (kernels.QKVRoPEStorer): plain weights, no q/k
// norm (it would sit between the projection and the rotation), a Direct
// cache and no hook watching the projections; the backend may decline the
// operands. Otherwise (and when a pending norm folds into the projections
// instead: normfuse.go) project, qkNorm and ropeAndAppend.
func (a *Attention) projectRoPE(b kernels.Backend, invFreq []float32, in normed, q, k, v *runtime.Tensor, cache Cache) error {
	f, ok := b.(kernels.QKVRoPEStorer)
	_, direct := cache.(Direct)
	if ok && direct && a.QNorm == nil && in.h.Dim(0) == 1 && plain(a.Q, a.K, a.V) && nn.Unwatched(a.Q, a.K, a.V) {
		ran, err := a.foldNorm(b, in, q, k, v)
		if err != nil {
			return err
		}
		if ran {
			return a.ropeAndAppend(b, invFreq, q, k, v, cache)
		}
		h, err := in.ready(b)
		if err != nil {
			return err
		}
		in = normed{h: h}
		kc, vc := cache.View(a.Layer)
		ran, err = f.ProjectRoPEStoreKV(kernels.QKVRoPE{Q: q, K: k, V: v, X: h,
			WQ: a.Q.Weight.Tensor(), WK: a.K.Weight.Tensor(), WV: a.V.Weight.Tensor(),
			BQ: biasOf(a.Q), BK: biasOf(a.K), BV: biasOf(a.V),
			KCache: kc, VCache: vc, Pos: cache.Len(), InvFreq: invFreq})
		if err != nil || ran {
			return err
		}
	}
	if err := a.project(b, in, q, k, v); err != nil {
		return err
	}
	if err := a.qkNorm(b, q, k); err != nil {
		return err
	}
	return a.ropeAndAppend(b, invFreq, q, k, v, cache)
}

// foldNorm runs the q/k/v projections with the pending norm of in folded
// in, as project does first, and adds the biases; ran is false when there
// is no pending norm or the backend declines it.
func (a *Attention) foldNorm(b kernels.Backend, in normed, q, k, v *runtime.Tensor) (bool, error) {
	np, ok := b.(kernels.NormProjector)
	if in.norm == nil || !ok {
		return false, nil
	}
	ran, err := np.NormMatMulN([]*runtime.Tensor{q, k, v}, in.x, in.norm.Weight.Tensor(), in.norm.Eps, weights(a.Q, a.K, a.V))
	if err != nil || !ran {
		return false, err
	}
	return true, a.addBiases(b, q, k, v)
}

// biasOf is l's bias tensor, or nil.
func biasOf(l *nn.Linear) *runtime.Tensor {
	if l.Bias == nil {
		return nil
	}
	return l.Bias.Tensor()
}
