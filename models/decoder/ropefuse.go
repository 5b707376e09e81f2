package decoder

import (
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// projectRoPE computes q, k and v from the input in, normalises q and k
// per head where the layer has q/k norms, rotates them and appends k and v
// to the cache. For several tokens into a Direct cache it is one op where
// the backend fuses it (projectRoPERows). For one token it is one op where
// the backend fuses the projections with the rest (kernels.QKVRoPEStorer):
// plain weights, no q/k norm (it would sit between the projection and the
// rotation), a Direct cache and no hook watching the projections; the
// backend may decline the operands. Otherwise (and when a pending norm folds into the projections
// instead: normfuse.go) project, then qkNorm and ropeAndAppend: one op
// where the backend fuses them (normRoPEStore), else two.
func (a *Attention) projectRoPE(b kernels.Backend, invFreq []float32, in normed, q, k, v *runtime.Tensor, cache Cache) error {
	f, ok := b.(kernels.QKVRoPEStorer)
	_, direct := cache.(Direct)
	if direct && in.h.Dim(0) > 1 {
		kc, vc := cache.View(a.Layer)
		ran, err := a.projectRoPERows(b, invFreq, in, q, k, v, kc, vc, cache.Len(), nil, nil)
		if err != nil || ran {
			return err
		}
	}
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
	if ran, err := a.normRoPEStore(b, invFreq, q, k, v, cache); err != nil || ran {
		return err
	}
	if err := a.qkNorm(b, q, k); err != nil {
		return err
	}
	return a.ropeAndAppend(b, invFreq, q, k, v, cache)
}

// normRoPEStore runs qkNorm and ropeAndAppend as one op where the backend
// fuses them (kernels.NormRoPEStorer): the layer has q/k norms of one eps
// over the head width, the cache is Direct and no hook watches the norms.
// ran is false when it does not apply or the backend declines; nothing
// then ran.
func (a *Attention) normRoPEStore(b kernels.Backend, invFreq []float32, q, k, v *runtime.Tensor, cache Cache) (bool, error) {
	f, ok := b.(kernels.NormRoPEStorer)
	if !ok || a.QNorm == nil || a.KNorm == nil || a.QNorm.Eps != a.KNorm.Eps || a.QNorm.Dim != a.KNorm.Dim ||
		q.Dim(-1) != a.QNorm.Dim || !nn.Unwatched(a.QNorm, a.KNorm) {
		return false, nil
	}
	if _, direct := cache.(Direct); !direct {
		return false, nil
	}
	kc, vc := cache.View(a.Layer)
	return f.NormRoPEStoreKV(kernels.QKNormRoPE{Q: q, K: k, V: v, QNorm: a.QNorm.Weight.Tensor(), KNorm: a.KNorm.Weight.Tensor(),
		Eps: a.QNorm.Eps, KCache: kc, VCache: vc, Pos: cache.Len(), InvFreq: invFreq})
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

// projectRoPERows runs q, k, v, RoPE and the store of k and v into the
// cache rows (kc, vc: positions pos0.. of a contiguous cache, or positions
// and slots of the paged pool) as one op where the backend fuses them for
// many rows (kernels.QKVRoPERowsStorer): plain weights without biases, no
// q/k norm, no hook watching the projections, no norm pending on the input
// (one the projections would fold in: normfuse.go). ran false: it does not
// apply or the backend declines; nothing ran.
func (a *Attention) projectRoPERows(b kernels.Backend, invFreq []float32, in normed, q, k, v, kc, vc *runtime.Tensor, pos0 int,
	positions, slots []int32) (bool, error) {
	f, ok := b.(kernels.QKVRoPERowsStorer)
	if !ok || in.norm != nil || a.QNorm != nil || !plain(a.Q, a.K, a.V) || a.Q.Bias != nil || a.K.Bias != nil || a.V.Bias != nil ||
		!nn.Unwatched(a.Q, a.K, a.V) {
		return false, nil
	}
	return f.ProjectRoPEStoreRows(kernels.QKVRoPERows{Q: q, K: k, V: v, X: in.h,
		WQ: a.Q.Weight.Tensor(), WK: a.K.Weight.Tensor(), WV: a.V.Weight.Tensor(),
		KCache: kc, VCache: vc, Pos: pos0, Positions: positions, Slots: slots, InvFreq: invFreq})
}
