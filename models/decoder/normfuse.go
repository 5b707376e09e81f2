package decoder

import (
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// Folded norms: for one token on a backend with kernels.NormProjector, the
// RMSNorm in front of the q/k/v projections, the one in front of
// gate·up·SiLU and the final norm in front of the LM head are left to the
// projections' GEMVs, which normalise the F32 residual stream themselves
// (the same bits as the norm's own op): one launch less each, and the
// normalised activation never goes through memory. FP8 q/k/v and gate·up
// weights fold the same way on a kernels.FP8NormProjector backend (within
// tolerance, not bits). As with fuse.go's fusions, only where no installed
// hook watches the norm, the projections or the module that runs them;
// where the backend declines the operands, the norm runs first and the
// projection as usual.

// normed is a projection's input: h, normalised already, or, while norm is
// set, the residual x that the projection still has to normalise with
// norm (into h where it cannot fold the norm in).
type normed struct {
	h, x *runtime.Tensor
	norm *nn.RMSNorm
}

// ready returns h, running the pending norm into it first.
func (in normed) ready(b kernels.Backend) (*runtime.Tensor, error) {
	if in.norm == nil {
		return in.h, nil
	}
	if err := in.norm.Forward(b, in.h, in.x); err != nil {
		return nil, err
	}
	return in.h, nil
}

// normInput is the input of the projections ls (run by module owner) of
// norm(x) into h: norm left pending where it may be folded into them
// (foldable), else run now.
func normInput(b kernels.Backend, h, x *runtime.Tensor, norm *nn.RMSNorm, owner nn.Module, ls ...*nn.Linear) (normed, error) {
	if foldable(b, x, norm, owner, ls...) {
		return normed{h: h, x: x, norm: norm}, nil
	}
	if err := norm.Forward(b, h, x); err != nil {
		return normed{}, err
	}
	return normed{h: h}, nil
}

// foldable reports whether norm may be folded into the projections ls of
// x: one token, plain weights on a kernels.NormProjector backend or FP8
// ones of one layout on a kernels.FP8NormProjector, and no hook watching
// the norm, owner (the module that runs the projections) or ls.
func foldable(b kernels.Backend, x *runtime.Tensor, norm *nn.RMSNorm, owner nn.Module, ls ...*nn.Linear) bool {
	if x.NumElements() != x.Dim(-1) {
		return false
	}
	_, plainOK := b.(kernels.NormProjector)
	_, fp8OK := b.(kernels.FP8NormProjector)
	if !(plainOK && plain(ls...)) && !(fp8OK && allFP8(ls...)) {
		return false
	}
	ms := []nn.Module{norm, owner}
	for _, l := range ls {
		ms = append(ms, l)
	}
	return nn.Unwatched(ms...)
}

// weights are the weight tensors of ls.
func weights(ls ...*nn.Linear) []*runtime.Tensor {
	ws := make([]*runtime.Tensor, len(ls))
	for i, l := range ls {
		ws[i] = l.Weight.Tensor()
	}
	return ws
}

// head computes the logits of x's rows into logits: Head(Norm(x)) with h as
// the normalised rows, the norm folded into the LM head's GEMV where it may
// be.
func (m *Model) head(b kernels.Backend, logits, h, x *runtime.Tensor) error {
	if p, ok := b.(kernels.NormProjector); ok && plain(m.Head) && foldable(b, x, m.Norm, m, m.Head) {
		ran, err := p.NormMatMul(logits, x, m.Norm.Weight.Tensor(), m.Norm.Eps, m.Head.Weight.Tensor())
		if err != nil {
			return err
		}
		if ran {
			return m.Head.AddBias(b, logits)
		}
	}
	if err := m.Norm.Forward(b, h, x); err != nil {
		return err
	}
	return m.Head.Forward(b, logits, h)
}
