package nn

import (
	"errors"
	"fmt"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// Linear is y = x·Wᵀ (+ bias) with W of shape [out, in] and an optional
// bias of out values. A quantized Linear (QuantizeFP8) holds W as 8-bit
// floats with a parameter of dequantization scales beside it.
type Linear struct {
	Base
	Weight *Parameter // W, [Out, In] ("weight")
	Bias   *Parameter // nil when the projection has no bias (Llama's have none)
	In     int        // input features: x's last dimension
	Out    int        // output features: W's rows
	// Scale is nil for a plain weight; for an FP8 weight it holds the
	// scales (F32, BF16 or F16, shaped as FP8 says) and Forward multiplies
	// through kernels.FP8MatMuler.
	Scale *Parameter
	FP8   kernels.FP8Layout // the FP8 weight's scale layout (with Scale)
}

// QuantizeFP8 declares the Linear's weight FP8 (F8_E4M3 [out, in]) with its
// scales in a parameter named scaleLocal ("weight_scale" for
// compressed-tensors checkpoints, "weight_scale_inv" for the block-wise
// "fp8" ones) laid out as layout says (ScaleShape). It adds the parameter
// and must be called before the weights are bound; a second call is an
// error.
func (l *Linear) QuantizeFP8(scaleLocal string, layout kernels.FP8Layout) error {
	if l.Scale != nil {
		return fmt.Errorf("nn.Linear %s: already quantized", l.Node().Name())
	}
	if l.Weight.Peek() != nil {
		return fmt.Errorf("nn.Linear %s: quantize before binding the weight", l.Node().Name())
	}
	if layout.Block < 0 {
		return fmt.Errorf("nn.Linear %s: negative FP8 block size %d", l.Node().Name(), layout.Block)
	}
	l.Scale = AddParam(l, scaleLocal, nil)
	l.Scale.declared = layout.ScaleShape(l.Out, l.In)
	l.FP8 = layout
	return nil
}

// SetFP8 switches a Linear whose plain weight is bound to its FP8 form, in
// place (the offload engine's stream dtype does this to the Linears it
// streams): the weight parameter is re-bound to q (F8_E4M3 [Out, In]) —
// the one documented way a parameter's dtype changes — and a scale
// parameter named scaleLocal is added, bound to scale (the layout's
// ScaleShape). UnsetFP8 undoes it. The Linear must own its weight (not a
// tied one) and no engine may hold the model meanwhile.
func (l *Linear) SetFP8(q, scale *runtime.Tensor, layout kernels.FP8Layout, scaleLocal string) error {
	name := l.Node().Name()
	switch {
	case l.Scale != nil:
		return fmt.Errorf("nn.Linear %s: already FP8", name)
	case l.Weight.owner != l.Node():
		return fmt.Errorf("nn.Linear %s: the weight is %s's (tied); it cannot change form", name, l.Weight.owner.Name())
	case l.Weight.Peek() == nil:
		return fmt.Errorf("nn.Linear %s: no weight bound", name)
	case q == nil || scale == nil:
		return fmt.Errorf("nn.Linear %s: SetFP8 with a nil tensor", name)
	case q.DType() != runtime.F8E4M3 || !q.Shape().Equal(runtime.Shape{l.Out, l.In}):
		return fmt.Errorf("nn.Linear %s: FP8 weight %v %v, want F8_E4M3 [%d %d]", name, q.DType(), q.Shape(), l.Out, l.In)
	case layout.Block < 0 || !scale.Shape().Equal(layout.ScaleShape(l.Out, l.In)):
		return fmt.Errorf("nn.Linear %s: scales %v for %v, want %v", name, scale.Shape(), layout, layout.ScaleShape(l.Out, l.In))
	}
	for _, p := range l.Node().params {
		if p.local == scaleLocal {
			return fmt.Errorf("nn.Linear %s: a parameter %s exists already", name, scaleLocal)
		}
	}
	l.Weight.rebind(q)
	l.Scale = AddParam(l, scaleLocal, scale)
	l.FP8 = layout
	return nil
}

// UnsetFP8 undoes SetFP8: the weight parameter is re-bound to w (the plain
// weight, [Out, In]) and the scale parameter removed.
func (l *Linear) UnsetFP8(w *runtime.Tensor) error {
	name := l.Node().Name()
	switch {
	case l.Scale == nil:
		return fmt.Errorf("nn.Linear %s: not FP8", name)
	case w == nil || !w.Shape().Equal(runtime.Shape{l.Out, l.In}):
		return fmt.Errorf("nn.Linear %s: plain weight %v, want [%d %d]", name, w, l.Out, l.In)
	}
	b := l.Node()
	for i, p := range b.params {
		if p == l.Scale {
			b.params = append(b.params[:i:i], b.params[i+1:]...)
			break
		}
	}
	l.Weight.rebind(w)
	l.Scale, l.FP8 = nil, kernels.FP8Layout{}
	return nil
}

// ScaleShape is the shape the scale parameter must have (nil when the
// Linear is not quantized).
func (l *Linear) ScaleShape() runtime.Shape {
	if l.Scale == nil {
		return nil
	}
	return l.FP8.ScaleShape(l.Out, l.In)
}

// NewLinear attaches a Linear without bias named local under parent; its
// weight, declared [out, in], is bound later (Parameter.Bind checks the
// shape). Building a model is code, not input: like Attach, it panics when
// in or out is not positive or parent already has a child named local
// (check sizes read from a file before building).
func NewLinear(parent Module, local string, in, out int) *Linear {
	positive("nn.NewLinear", parent, local, "in", in, "out", out)
	l := &Linear{In: in, Out: out}
	Attach(parent, local, l)
	l.Weight = AddParam(l, "weight", nil)
	l.Weight.declared = runtime.Shape{out, in}
	return l
}

// NewLinearBias is NewLinear with a bias parameter ("bias", [out]).
func NewLinearBias(parent Module, local string, in, out int) *Linear {
	l := NewLinear(parent, local, in, out)
	l.Bias = AddParam(l, "bias", nil)
	l.Bias.declared = runtime.Shape{out}
	return l
}

// positive panics, naming the constructor and the module, when a size is
// not positive; sizes come in name, value pairs.
func positive(fn string, parent Module, local string, sizes ...any) {
	for i := 0; i+1 < len(sizes); i += 2 {
		if v := sizes[i+1].(int); v <= 0 {
			panic(fmt.Sprintf("%s(%q under %q): %s %d is not positive", fn, local, parent.Node().Name(), sizes[i], v))
		}
	}
}

// Forward computes out[T,out] = x[T,in]·Wᵀ (+ bias on every row). out may
// have any shape of T·out values ([T,H,d] for a q projection). A nil
// backend, x or out, or an unbound weight, is an error naming it.
func (l *Linear) Forward(b kernels.Backend, out, x *runtime.Tensor) error {
	if err := checkArgs("nn.Linear", l == nil, b, "out", out, "x", x); err != nil {
		return err
	}
	return Call(l, func() error {
		if err := l.MatMul(b, out, x); err != nil {
			return err
		}
		return l.AddBias(b, out)
	})
}

// checkArgs is a layer forward's error for a nil layer, backend or tensor
// (tensors come in name, value pairs), or nil.
func checkArgs(layer string, nilLayer bool, b kernels.Backend, tensors ...any) error {
	if nilLayer {
		return fmt.Errorf("%s.Forward: the %s is nil", layer, layer)
	}
	if b == nil {
		return fmt.Errorf("%s.Forward: nil backend", layer)
	}
	for i := 0; i+1 < len(tensors); i += 2 {
		if t, _ := tensors[i+1].(*runtime.Tensor); t == nil {
			return fmt.Errorf("%s.Forward: %s is nil", layer, tensors[i])
		}
	}
	return nil
}

// errUnbound is the error for a parameter read before it was bound.
func errUnbound(layer string, p *Parameter) error {
	return fmt.Errorf("%s: parameter %s is not bound (bind the weights first)", layer, p.Name())
}

// MatMul computes out = x·Wᵀ without the bias and outside Call (for a
// module that runs its children's ops itself): b.MatMul for a plain
// weight, kernels.MatMulFP8 with the scales for an FP8 one. An unbound
// weight is an error naming it.
func (l *Linear) MatMul(b kernels.Backend, out, x *runtime.Tensor) error {
	if b == nil {
		return errors.New("nn.Linear.MatMul: nil backend")
	}
	w := l.Weight.Tensor()
	if w == nil {
		return errUnbound("nn.Linear", l.Weight)
	}
	if l.Scale != nil {
		sc := l.Scale.Tensor()
		if sc == nil {
			return errUnbound("nn.Linear", l.Scale)
		}
		return kernels.MatMulFP8(b, out, x, w, sc, l.FP8)
	}
	return b.MatMul(out, x, w)
}

// AddBias adds the bias to every row of out (out[t,n] += bias[n], out
// viewed as rows of Out values); it does nothing without a bias. Fused
// projections (kernels.MultiMatMuler) call it after their product.
func (l *Linear) AddBias(b kernels.Backend, out *runtime.Tensor) error {
	if l.Bias == nil {
		return nil
	}
	if out == nil {
		return fmt.Errorf("nn.Linear %s: AddBias of a nil output", l.Node().Name())
	}
	bias := l.Bias.Tensor()
	if bias == nil {
		return errUnbound("nn.Linear", l.Bias)
	}
	if l.Out <= 0 || out.NumElements()%l.Out != 0 {
		return fmt.Errorf("nn.Linear %s: output %v is not rows of %d values", l.Node().Name(), out.Shape(), l.Out)
	}
	rows, err := out.Reshape(out.NumElements()/l.Out, l.Out)
	if err != nil {
		return err
	}
	return kernels.AddBias(b, rows, bias)
}

// Embedding maps token ids to rows of a table of shape [vocab, dim].
type Embedding struct {
	Base
	Weight *Parameter // the table, [Vocab, Dim] ("weight")
	Vocab  int        // rows: token ids 0..Vocab-1
	Dim    int        // the width of a row
}

// NewEmbedding attaches an Embedding named local under parent; its table,
// declared [vocab, dim], is bound later. It panics as NewLinear does (a
// size not positive, a local name taken).
func NewEmbedding(parent Module, local string, vocab, dim int) *Embedding {
	positive("nn.NewEmbedding", parent, local, "vocab", vocab, "dim", dim)
	e := &Embedding{Vocab: vocab, Dim: dim}
	Attach(parent, local, e)
	e.Weight = AddParam(e, "weight", nil)
	e.Weight.declared = runtime.Shape{vocab, dim}
	return e
}

// Forward computes out[t,:] = W[ids[t],:]. A nil backend or out, or an
// unbound table, is an error naming it.
func (e *Embedding) Forward(b kernels.Backend, out *runtime.Tensor, ids []int32) error {
	if err := checkArgs("nn.Embedding", e == nil, b, "out", out); err != nil {
		return err
	}
	return Call(e, func() error {
		w := e.Weight.Tensor()
		if w == nil {
			return errUnbound("nn.Embedding", e.Weight)
		}
		return b.Embedding(out, w, ids)
	})
}

// RMSNorm is y = x / sqrt(mean(x²) + eps) · w over the last dimension.
type RMSNorm struct {
	Base
	Weight *Parameter // the per-feature scale w, [Dim] ("weight")
	Dim    int        // the normalised (last) dimension
	Eps    float32    // added to mean(x²) under the square root
}

// NewRMSNorm attaches an RMSNorm named local under parent; its weight,
// declared [dim], is bound later. It panics as NewLinear does (dim not
// positive, a local name taken).
func NewRMSNorm(parent Module, local string, dim int, eps float32) *RMSNorm {
	positive("nn.NewRMSNorm", parent, local, "dim", dim)
	n := &RMSNorm{Dim: dim, Eps: eps}
	Attach(parent, local, n)
	n.Weight = AddParam(n, "weight", nil)
	n.Weight.declared = runtime.Shape{dim}
	return n
}

// Forward normalises each row of x into out. A nil backend, x or out, or
// an unbound weight, is an error naming it.
func (n *RMSNorm) Forward(b kernels.Backend, out, x *runtime.Tensor) error {
	if err := checkArgs("nn.RMSNorm", n == nil, b, "out", out, "x", x); err != nil {
		return err
	}
	return Call(n, func() error {
		w := n.Weight.Tensor()
		if w == nil {
			return errUnbound("nn.RMSNorm", n.Weight)
		}
		return b.RMSNorm(out, x, w, n.Eps)
	})
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
