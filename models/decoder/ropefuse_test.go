package decoder_test

import (
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models"
	_ "github.com/flextensor-go/flextensor/models/qwen3" // registers the qwen3 family
)

// qkvRoPEFuser is the CPU backend with its kernels.QKVRoPEStorer counted;
// decline makes it decline every call.
type qkvRoPEFuser struct {
	*kernels.CPUBackend
	calls   int
	decline bool
}

func (f *qkvRoPEFuser) ProjectRoPEStoreKV(a kernels.QKVRoPE) (bool, error) {
	if f.decline {
		return false, nil
	}
	f.calls++
	return f.CPUBackend.ProjectRoPEStoreKV(a)
}

// TestFusedQKVRoPE: every one-token step runs each layer's q/k/v
// projections, RoPE and KV store as one kernels.QKVRoPEStorer op (none for
// the prefill's layers), with the logits of the separate ops (the op
// declined, or a backend without it); a hook watching
// a layer's q projection keeps that layer unfused, and a cache that is not
// Direct keeps every layer unfused.
func TestFusedQKVRoPE(t *testing.T) {
	m, b, _ := loadTiny(t)
	cb := b.(*kernels.CPUBackend)
	prompt, ids := []int32{5, 17, 42, 3}, []int32{7, 8, 9, 10}
	run := func(be kernels.Backend) [][]float32 { return freshSteps(t, m, be, prompt, ids) }
	want := run(&qkvRoPEFuser{CPUBackend: cb, decline: true})
	same := func(what string, got [][]float32) {
		t.Helper()
		for i := range want {
			if !slices.Equal(want[i], got[i]) {
				t.Fatalf("%s: forward %d: logits differ from the separate ops", what, i)
			}
		}
	}
	if _, ok := kernels.Backend(&adder{Backend: b}).(kernels.QKVRoPEStorer); ok {
		t.Fatal("test set-up: the wrapped backend still has the fused op")
	}
	same("no fused op", run(&adder{Backend: b}))
	L := len(m.Layers)
	f := &qkvRoPEFuser{CPUBackend: cb}
	same("fused", run(f))
	if f.calls != L*len(ids) {
		t.Fatalf("fused: %d calls, want %d (one a layer a one-token step)", f.calls, L*len(ids))
	}

	f = &qkvRoPEFuser{CPUBackend: cb, decline: true}
	same("declined", run(f))

	remove := m.Tree().AddHook(watchOne{m: m.Layers[0].Attn.Q})
	f = &qkvRoPEFuser{CPUBackend: cb}
	got := run(f)
	remove()
	same("q_proj of layer 0 watched", got)
	if f.calls != (L-1)*len(ids) {
		t.Fatalf("q_proj of layer 0 watched: %d calls, want %d", f.calls, (L-1)*len(ids))
	}

	kv, err := m.NewKVCache(cb, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Free()
	f = &qkvRoPEFuser{CPUBackend: cb}
	ao := &appendOnly{kv: kv}
	same("cache not Direct", steps(t, m, f, ao, prompt, ids))
	if f.calls != 0 || ao.appends != L*(1+len(ids)) {
		t.Fatalf("cache not Direct: %d fused calls, %d appends; want 0 and %d", f.calls, ao.appends, L*(1+len(ids)))
	}
}

// normRoPEFuser is the CPU backend with its kernels.NormRoPEStorer counted;
// decline makes it decline every call.
type normRoPEFuser struct {
	*kernels.CPUBackend
	calls   int
	decline bool
}

func (f *normRoPEFuser) NormRoPEStoreKV(a kernels.QKNormRoPE) (bool, error) {
	if f.decline {
		return false, nil
	}
	f.calls++
	return f.CPUBackend.NormRoPEStoreKV(a)
}

// bare hides every optional capability of a backend.
type bare struct{ kernels.Backend }

// TestFusedQKNormRoPE: on the Qwen3 fixture (per-head q/k norms) every
// forward, prefill and one-token steps, runs each layer's q/k norms, RoPE
// and KV store as one kernels.NormRoPEStorer op, with the logits of the
// separate ops (the op declined, or a backend without any optional op); a
// hook watching a layer's q norm keeps that layer unfused, and a cache that
// is not Direct keeps every layer unfused. The Llama fixture (no q/k
// norms) never calls it.
func TestFusedQKNormRoPE(t *testing.T) {
	d := devtest.NewCPU(t)
	m := testmodel.Load(t, models.Load, "../../testdata/tiny-qwen3", d.Dev)
	cb := d.Backend.(*kernels.CPUBackend)
	if m.Layers[0].Attn.QNorm == nil {
		t.Fatal("test set-up: the Qwen3 fixture has no q/k norms")
	}
	prompt, ids := []int32{5, 17, 42, 3}, []int32{7, 8, 9, 10}
	run := func(be kernels.Backend) [][]float32 { return freshSteps(t, m, be, prompt, ids) }
	want := run(&normRoPEFuser{CPUBackend: cb, decline: true})
	same := func(what string, got [][]float32) {
		t.Helper()
		for i := range want {
			if !slices.Equal(want[i], got[i]) {
				t.Fatalf("%s: forward %d: logits differ from the separate ops", what, i)
			}
		}
	}
	if _, ok := kernels.Backend(bare{cb}).(kernels.NormRoPEStorer); ok {
		t.Fatal("test set-up: the wrapped backend still has the fused op")
	}
	same("no optional ops", run(bare{cb}))
	L, forwards := len(m.Layers), 1+len(ids)
	f := &normRoPEFuser{CPUBackend: cb}
	same("fused", run(f))
	if f.calls != L*forwards {
		t.Fatalf("fused: %d calls, want %d (one a layer a forward)", f.calls, L*forwards)
	}

	remove := m.Tree().AddHook(watchOne{m: m.Layers[0].Attn.QNorm})
	f = &normRoPEFuser{CPUBackend: cb}
	got := run(f)
	remove()
	same("q_norm of layer 0 watched", got)
	if f.calls != (L-1)*forwards {
		t.Fatalf("q_norm of layer 0 watched: %d calls, want %d", f.calls, (L-1)*forwards)
	}

	kv, err := m.NewKVCache(cb, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Free()
	f = &normRoPEFuser{CPUBackend: cb}
	ao := &appendOnly{kv: kv}
	same("cache not Direct", steps(t, m, f, ao, prompt, ids))
	if f.calls != 0 || ao.appends != L*forwards {
		t.Fatalf("cache not Direct: %d fused calls, %d appends; want 0 and %d", f.calls, ao.appends, L*forwards)
	}

	lm, lb, _ := loadTiny(t)
	f = &normRoPEFuser{CPUBackend: lb.(*kernels.CPUBackend)}
	freshSteps(t, lm, f, prompt, ids)
	if f.calls != 0 {
		t.Fatalf("llama fixture: %d fused calls, want none", f.calls)
	}
}
