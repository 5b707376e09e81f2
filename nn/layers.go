package nn

import (
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// Linear is y = x·Wᵀ with W of shape [out, in] (no bias: Llama has none).
type Linear struct {
	Base
	Weight  *Parameter
	In, Out int
}

// NewLinear attaches a Linear named local under parent; its weight is bound later.
func NewLinear(parent Module, local string, in, out int) *Linear {
	l := &Linear{In: in, Out: out}
	Attach(parent, local, l)
	l.Weight = AddParam(l, "weight", nil)
	return l
}

// Forward computes out[T,out] = x[T,in]·Wᵀ.
func (l *Linear) Forward(b kernels.Backend, out, x *runtime.Tensor) error {
	return Call(l, func() error { return b.MatMul(out, x, l.Weight.Tensor()) })
}

// Embedding maps token ids to rows of a table of shape [vocab, dim].
type Embedding struct {
	Base
	Weight     *Parameter
	Vocab, Dim int
}

// NewEmbedding attaches an Embedding named local under parent.
func NewEmbedding(parent Module, local string, vocab, dim int) *Embedding {
	e := &Embedding{Vocab: vocab, Dim: dim}
	Attach(parent, local, e)
	e.Weight = AddParam(e, "weight", nil)
	return e
}

// Forward computes out[t,:] = W[ids[t],:].
func (e *Embedding) Forward(b kernels.Backend, out *runtime.Tensor, ids []int32) error {
	return Call(e, func() error { return b.Embedding(out, e.Weight.Tensor(), ids) })
}

// RMSNorm is y = x / sqrt(mean(x²) + eps) · w over the last dimension.
type RMSNorm struct {
	Base
	Weight *Parameter
	Dim    int
	Eps    float32
}

// NewRMSNorm attaches an RMSNorm named local under parent.
func NewRMSNorm(parent Module, local string, dim int, eps float32) *RMSNorm {
	n := &RMSNorm{Dim: dim, Eps: eps}
	Attach(parent, local, n)
	n.Weight = AddParam(n, "weight", nil)
	return n
}

// Forward normalises each row of x into out.
func (n *RMSNorm) Forward(b kernels.Backend, out, x *runtime.Tensor) error {
	return Call(n, func() error { return b.RMSNorm(out, x, n.Weight.Tensor(), n.Eps) })
}

// Container is a module with children and no forward of its own ("model",
// "model.layers").
type Container struct{ Base }

// NewContainer attaches an empty Container named local under parent.
func NewContainer(parent Module, local string) *Container {
	c := &Container{}
	Attach(parent, local, c)
	return c
}
