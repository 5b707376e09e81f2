package nn

import (
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// cpuTensor allocates an F32 tensor on dev or fails the test.
func cpuTensor(t *testing.T, dev runtime.Device, shape ...int) *runtime.Tensor {
	t.Helper()
	x, err := runtime.NewTensor(dev, runtime.F32, shape, "t")
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// noPanic runs f and fails the test if it panics.
func noPanic(t *testing.T, what string, f func() error) error {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked: %v", what, r)
		}
	}()
	return f()
}

// TestLayerForwardNilInput: the layers' forwards with a nil backend, nil
// tensors, an unbound weight or a nil layer give errors naming what is
// missing; Call with a nil module or function does too.
func TestLayerForwardNilInput(t *testing.T) {
	dev := runtime.NewCPU(0)
	b, err := kernels.NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	root := &Container{}
	Init(root, "")
	lin := NewLinear(root, "lin", 3, 2)
	biased := NewLinearBias(root, "biased", 3, 2)
	emb := NewEmbedding(root, "emb", 5, 3)
	norm := NewRMSNorm(root, "norm", 3, 1e-6)
	x, out, y := cpuTensor(t, dev, 1, 3), cpuTensor(t, dev, 1, 2), cpuTensor(t, dev, 1, 3)
	var nilLin *Linear
	var nilNorm *RMSNorm
	var nilEmb *Embedding
	for _, c := range []struct {
		what string
		f    func() error
		want string
	}{
		{"Linear unbound", func() error { return lin.Forward(b, out, x) }, "parameter lin.weight is not bound"},
		{"Linear nil backend", func() error { return lin.Forward(nil, out, x) }, "nn.Linear.Forward: nil backend"},
		{"Linear nil x", func() error { return lin.Forward(b, out, nil) }, "nn.Linear.Forward: x is nil"},
		{"Linear nil out", func() error { return lin.Forward(b, nil, x) }, "nn.Linear.Forward: out is nil"},
		{"nil Linear", func() error { return nilLin.Forward(b, out, x) }, "the nn.Linear is nil"},
		{"Linear.MatMul nil backend", func() error { return lin.MatMul(nil, out, x) }, "nil backend"},
		{"RMSNorm unbound", func() error { return norm.Forward(b, y, x) }, "parameter norm.weight is not bound"},
		{"RMSNorm nil x", func() error { return norm.Forward(b, y, nil) }, "nn.RMSNorm.Forward: x is nil"},
		{"RMSNorm nil backend", func() error { return norm.Forward(nil, y, x) }, "nil backend"},
		{"nil RMSNorm", func() error { return nilNorm.Forward(b, y, x) }, "the nn.RMSNorm is nil"},
		{"Embedding unbound", func() error { return emb.Forward(b, y, []int32{1}) }, "parameter emb.weight is not bound"},
		{"Embedding nil out", func() error { return emb.Forward(b, nil, []int32{1}) }, "out is nil"},
		{"nil Embedding", func() error { return nilEmb.Forward(b, y, []int32{1}) }, "the nn.Embedding is nil"},
		{"Call nil module", func() error { return Call(nil, func() error { return nil }) }, "nn.Call"},
		{"Call nil function", func() error { return Call(lin, nil) }, "nn.Call"},
	} {
		err := noPanic(t, c.what, c.f)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.what, err, c.want)
		}
	}
	// Bound, the same layers run; an unbound bias is then named.
	if err := lin.Weight.Bind(cpuTensor(t, dev, 2, 3)); err != nil {
		t.Fatal(err)
	}
	if err := lin.Forward(b, out, x); err != nil {
		t.Errorf("bound Linear: %v", err)
	}
	if err := biased.Weight.Bind(cpuTensor(t, dev, 2, 3)); err != nil {
		t.Fatal(err)
	}
	if err := noPanic(t, "unbound bias", func() error { return biased.Forward(b, out, x) }); err == nil || !strings.Contains(err.Error(), "biased.bias is not bound") {
		t.Errorf("unbound bias: %v", err)
	}
}

// TestBindChecksDeclaredShape: the first bind of a layer's parameter must
// have the shape the layer declared; a parameter added without a layer
// takes any shape first.
func TestBindChecksDeclaredShape(t *testing.T) {
	dev := runtime.NewMeta()
	root := &Container{}
	Init(root, "")
	lin := NewLinearBias(root, "l", 4, 3)
	emb := NewEmbedding(root, "e", 7, 4)
	norm := NewRMSNorm(root, "n", 4, 1e-6)
	meta := func(shape ...int) *runtime.Tensor { return cpuTensor(t, dev, shape...) }
	for _, c := range []struct {
		p         *Parameter
		bad, good *runtime.Tensor
		wantShape string
	}{
		{lin.Weight, meta(5, 5), meta(3, 4), "[3 4]"},
		{lin.Weight, meta(4, 3), nil, "[3 4]"},
		{lin.Bias, meta(4), meta(3), "[3]"},
		{emb.Weight, meta(4, 7), meta(7, 4), "[7 4]"},
		{norm.Weight, meta(1, 4), meta(4), "[4]"},
	} {
		before := c.p.Peek()
		err := c.p.Bind(c.bad)
		if err == nil || !strings.Contains(err.Error(), "declares shape "+c.wantShape) || !strings.Contains(err.Error(), c.p.Name()) {
			t.Errorf("%s: bind %v: %v, want an error naming the declared %s", c.p.Name(), c.bad.Shape(), err, c.wantShape)
		}
		if c.p.Peek() != before {
			t.Errorf("%s: a refused bind bound", c.p.Name())
		}
		if c.good != nil {
			if err := c.p.Bind(c.good); err != nil {
				t.Errorf("%s: bind of the declared shape %v: %v", c.p.Name(), c.good.Shape(), err)
			}
		}
	}
	if got := lin.Weight.Declared(); !got.Equal(runtime.Shape{3, 4}) {
		t.Errorf("Linear weight declared %v", got)
	}
	free := &leaf{}
	Attach(root, "free", free)
	free.W = AddParam(free, "w", nil)
	if free.W.Declared() != nil {
		t.Errorf("AddParam's parameter declares %v", free.W.Declared())
	}
	if err := free.W.Bind(meta(5, 5)); err != nil {
		t.Errorf("a parameter with no declared shape: %v", err)
	}
}

// TestBuildMistakesPanic: building a tree with a size that is not positive
// or a local name taken twice panics with a message naming the module
// (documented: building is code, not input).
func TestBuildMistakesPanic(t *testing.T) {
	for _, c := range []struct {
		what  string
		build func(root Module)
		want  string
	}{
		{"Linear negative in", func(r Module) { NewLinear(r, "neg", -1, 3) }, `nn.NewLinear("neg" under ""): in -1 is not positive`},
		{"Linear zero out", func(r Module) { NewLinear(r, "z", 2, 0) }, "out 0 is not positive"},
		{"Embedding zero vocab", func(r Module) { NewEmbedding(r, "e", 0, 3) }, "vocab 0 is not positive"},
		{"RMSNorm negative dim", func(r Module) { NewRMSNorm(r, "n", -2, 1e-6) }, "dim -2 is not positive"},
		{"duplicate name", func(r Module) { NewLinear(r, "l", 2, 2); NewLinear(r, "l", 2, 2) }, `already has a child named "l"`},
		{"duplicate container", func(r Module) { c := NewContainer(r, "c"); NewRMSNorm(c, "x", 2, 1e-6); NewLinear(c, "x", 2, 2) }, `"c" already has a child named "x"`},
		{"empty name", func(r Module) { NewContainer(r, "") }, "empty local name"},
	} {
		root := &Container{}
		Init(root, "")
		func() {
			defer func() {
				r := recover()
				if msg, _ := r.(string); !strings.Contains(msg, c.want) {
					t.Errorf("%s: recovered %v, want a panic containing %q", c.what, r, c.want)
				}
			}()
			c.build(root)
		}()
	}
}
