package decoder_test

import (
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// adder gives the CPU backend kernels.MatMulAdder through the reference
// (MatMul into a scratch, Add) and counts the calls.
type adder struct {
	kernels.Backend
	calls int
}

func (a *adder) MatMulAdd(y, x, w *runtime.Tensor) error {
	a.calls++
	tmp, err := runtime.NewTensor(a.Device(), runtime.F32, y.Shape(), "test scratch")
	if err != nil {
		return err
	}
	defer tmp.Buffer().Free()
	return kernels.MatMulAdd(a.Backend, y, x, w, tmp)
}

// watchO is a hook that watches the o_proj of one layer.
type watchO struct{ o nn.Module }

func (h watchO) Enter(nn.Module) error             { return nil }
func (h watchO) Exit(_ nn.Module, err error) error { return err }
func (h watchO) Watches(m nn.Module) bool          { return m == h.o }

// TestResidualAccumulate: on a backend with MatMulAdder every layer's
// o_proj and down_proj add into the residual stream (two calls a layer and
// forward) and the logits of a prefill and decode steps are exactly those
// of the product-then-add path; NoResidualAccumulate and a hook watching a
// projection each turn it off where they apply.
func TestResidualAccumulate(t *testing.T) {
	m, b, _ := loadTiny(t)
	prompt, ids := []int32{5, 17, 42, 3}, []int32{7, 8, 9}
	run := func(be kernels.Backend) [][]float32 {
		cache, err := m.NewKVCache(be, 16)
		if err != nil {
			t.Fatal(err)
		}
		defer cache.Free()
		return steps(t, m, be, cache, prompt, ids)
	}
	want := run(b)
	a := &adder{Backend: b}
	got := run(a)
	L, forwards := len(m.Layers), 1+len(ids)
	if a.calls != 2*L*forwards {
		t.Fatalf("%d MatMulAdd calls, want 2 a layer and forward = %d", a.calls, 2*L*forwards)
	}
	for i := range want {
		if !slices.Equal(want[i], got[i]) {
			t.Fatalf("forward %d: logits with the residual accumulated differ from product-then-add", i)
		}
	}

	m.NoResidualAccumulate = true
	a.calls = 0
	got = run(a)
	m.NoResidualAccumulate = false
	if a.calls != 0 {
		t.Fatalf("NoResidualAccumulate: %d MatMulAdd calls", a.calls)
	}

	remove := m.Tree().AddHook(watchO{o: m.Layers[1].Attn.O})
	a.calls = 0
	got = run(a)
	remove()
	if a.calls != (2*L-1)*forwards {
		t.Fatalf("o_proj of layer 1 watched: %d MatMulAdd calls, want %d", a.calls, (2*L-1)*forwards)
	}
	for i := range want {
		if !slices.Equal(want[i], got[i]) {
			t.Fatalf("forward %d, a projection watched: logits differ", i)
		}
	}
}

var _ kernels.MatMulAdder = (*adder)(nil)
