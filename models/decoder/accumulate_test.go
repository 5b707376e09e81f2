package decoder_test

import (
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
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

// TestResidualAccumulate: on a backend with MatMulAdder every layer's
// o_proj and down_proj add into the residual stream (two calls a layer and
// forward) and the logits of a prefill and decode steps are exactly those
// of the product-then-add path; NoResidualAccumulate and a hook watching a
// projection each turn it off where they apply.
func TestResidualAccumulate(t *testing.T) {
	m, b, _ := loadTiny(t)
	prompt, ids := []int32{5, 17, 42, 3}, []int32{7, 8, 9}
	run := func(be kernels.Backend) [][]float32 { return freshSteps(t, m, be, prompt, ids) }
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

	remove := m.Tree().AddHook(watchOne{m: m.Layers[1].Attn.O})
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

// viaNorm is adder with kernels.ResidualNormer for forwards of minT tokens
// or more, through the CPU reference (AddRMSNorm of y as it is), counting
// the calls.
type viaNorm struct {
	*adder
	minT, normCalls int
}

func (v *viaNorm) ResidualViaNorm(T, dim int) bool { return T >= v.minT }

func (v *viaNorm) AddBF16RMSNorm(out, x, y, w *runtime.Tensor, eps float32) error {
	v.normCalls++
	return v.Backend.(kernels.AddRMSNormer).AddRMSNorm(out, x, y, w, eps)
}

// TestResidualViaNorm: on a kernels.ResidualNormer backend a prefill of
// at least the backend's token count writes o_proj into h and adds it in
// the post-attention norm (one AddBF16RMSNorm and one MatMulAdd, the down
// projection's, a layer but the last, which goes on past attention with
// one row) while decode steps keep accumulating in the GEMM;
// on the CPU, where h is F32, the logits are exactly the reference's. A
// hook watching the post-attention norm turns it off.
func TestResidualViaNorm(t *testing.T) {
	m, b, _ := loadTiny(t)
	if _, ok := b.(kernels.AddRMSNormer); !ok {
		t.Fatal("the CPU backend has no AddRMSNorm")
	}
	prompt, ids := []int32{5, 17, 42, 3}, []int32{7, 8}
	run := func(be kernels.Backend) [][]float32 { return freshSteps(t, m, be, prompt, ids) }
	want := run(b)
	v := &viaNorm{adder: &adder{Backend: b}, minT: 2}
	got := run(v)
	L := len(m.Layers)
	// The prefill's last layer goes on past attention with the last row
	// alone (lastrows.go), below minT: its o_proj accumulates.
	if v.normCalls != L-1 || v.calls != L+1+2*L*len(ids) {
		t.Fatalf("%d AddBF16RMSNorm and %d MatMulAdd calls, want %d and %d", v.normCalls, v.calls, L-1, L+1+2*L*len(ids))
	}
	for i := range want {
		if !slices.Equal(want[i], got[i]) {
			t.Fatalf("forward %d: logits with the residual added in the norm differ from the reference", i)
		}
	}
	remove := m.Tree().AddHook(watchOne{m: m.Layers[0].PostNorm})
	v.normCalls = 0
	run(v)
	remove()
	if v.normCalls != L-2 { // neither layer 0's nor the last layer's (one row past attention)
		t.Fatalf("layer 0's post-attention norm watched: %d AddBF16RMSNorm calls, want %d", v.normCalls, L-2)
	}
}
