package decoder

import (
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// Norm tails: for one token on a backend with kernels.MatMulAddNormer, the
// residual-adding o_proj and down_proj (accumulate.go) also leave the
// RMSNorm that follows them in h: o_proj the layer's post-attention norm,
// down_proj the next layer's input norm or, after the last layer, the
// final norm in front of the LM head. The norm's own launch goes. Only
// where no installed hook watches the norm; across layers (down_proj) only
// on a tree with no hooks at all and no per-layer graphs, so that the
// layer after runs right after this one, on the same backend and
// workspace, op by op or in the same captured step. Where the backend
// declines the operands, the product adds as usual and the norm runs as
// usual.

// tailAdder is a MatMulAdder whose product also leaves norm(y) in out
// where the backend takes it (ran then reports it).
type tailAdder struct {
	f    kernels.MatMulAddNormer
	acc  kernels.MatMulAdder
	out  *runtime.Tensor
	norm *nn.RMSNorm
	ran  bool
}

// MatMulAdd sets y += x·wᵀ and, where the backend fuses it, out =
// norm(y).
func (t *tailAdder) MatMulAdd(y, x, w *runtime.Tensor) error {
	ran, err := t.f.MatMulAddNorm(y, x, w, t.out, t.norm.Weight.Tensor(), t.norm.Eps)
	if err != nil {
		return err
	}
	if t.ran = ran; ran {
		return nil
	}
	return t.acc.MatMulAdd(y, x, w)
}

// withTail returns acc, or, for one token on a kernels.MatMulAddNormer
// backend with norm unwatched, acc with norm(y) into out as its tail (and
// that tailAdder, to ask whether it ran).
func withTail(b kernels.Backend, acc kernels.MatMulAdder, T int, out *runtime.Tensor, norm *nn.RMSNorm) (kernels.MatMulAdder, *tailAdder) {
	f, ok := b.(kernels.MatMulAddNormer)
	if _, fp8 := acc.(fp8Adder); fp8 { // MatMulAddNorm takes plain weights only
		return acc, nil
	}
	if acc == nil || !ok || T != 1 || norm == nil || !nn.Unwatched(norm) {
		return acc, nil
	}
	t := &tailAdder{f: f, acc: acc, out: out, norm: norm}
	return t, t
}

// nextNorm is the norm that reads the residual right after layer l's MLP:
// the next layer's input norm, or the final norm after the last layer; nil
// where it may not be fused into l's down_proj (a tree with hooks, layers
// with graphs of their own, a sharded model).
func (m *Model) nextNorm(l *Layer) *nn.RMSNorm {
	if m.tp != nil || m.Node().Tree().HasHooks() || l.graph != nil || l.Index < 0 || l.Index >= len(m.Layers) || m.Layers[l.Index] != l {
		return nil
	}
	if l.Index == len(m.Layers)-1 {
		return m.Norm
	}
	if next := m.Layers[l.Index+1]; next.graph == nil {
		return next.InputNorm
	}
	return nil
}

// tailNormed is what the last down_proj's tail left in the workspace's h:
// norm of the residual stream at x (nothing while norm is nil).
type tailNormed struct {
	norm *nn.RMSNorm
	x    uintptr
}

// takeNormed reports whether the first row of h holds norm of the residual
// x (the last down_proj's tail wrote it) and forgets it either way.
func (w *workspace) takeNormed(norm *nn.RMSNorm, x *runtime.Tensor) bool {
	ok := norm != nil && w.normed.norm == norm && w.normed.x == x.Ptr()
	w.normed = tailNormed{}
	return ok
}
