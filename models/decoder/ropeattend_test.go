package decoder_test

import (
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models"
)

// ropeAttender is the CPU backend with its kernels.RoPEAttender counted;
// decline makes it decline every call (after counting it). Its
// kernels.QKVRoPEStorer declines, as the CUDA backend's does by default
// (the CPU's would take the RoPE into the projection).
type ropeAttender struct {
	*kernels.CPUBackend
	calls   int
	decline bool
}

func (f *ropeAttender) ProjectRoPEStoreKV(kernels.QKVRoPE) (bool, error) { return false, nil }

func (f *ropeAttender) RoPEAttend(a kernels.RoPEAttention) (bool, error) {
	f.calls++
	if f.decline {
		return false, nil
	}
	return f.CPUBackend.RoPEAttend(a)
}

// TestRoPEAttend: every one-token step hands each layer's RoPE, KV append
// and attention to kernels.RoPEAttender as one op (none for the prefill's
// layers), with the logits of the separate ops (a backend without any
// optional op); where the op declines the decoder runs them apart, with
// the same logits. A cache that is not Direct, and the Qwen3 fixture's
// q/k norms, never call it.
func TestRoPEAttend(t *testing.T) {
	m, b, _ := loadTiny(t)
	cb := b.(*kernels.CPUBackend)
	prompt, ids := []int32{5, 17, 42, 3}, []int32{7, 8, 9, 10}
	run := func(be kernels.Backend) [][]float32 { return freshSteps(t, m, be, prompt, ids) }
	if _, ok := kernels.Backend(bare{cb}).(kernels.RoPEAttender); ok {
		t.Fatal("test set-up: the wrapped backend still has the fused op")
	}
	want := run(bare{cb})
	same := func(what string, got [][]float32) {
		t.Helper()
		for i := range want {
			if !slices.Equal(want[i], got[i]) {
				t.Fatalf("%s: forward %d: logits differ from the separate ops", what, i)
			}
		}
	}
	L := len(m.Layers)
	for _, decline := range []bool{false, true} {
		f := &ropeAttender{CPUBackend: cb, decline: decline}
		same(map[bool]string{false: "fused", true: "declined"}[decline], run(f))
		if f.calls != L*len(ids) {
			t.Fatalf("decline %v: %d calls, want %d (one a layer a one-token step)", decline, f.calls, L*len(ids))
		}
	}

	kv, err := m.NewKVCache(cb, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Free()
	f := &ropeAttender{CPUBackend: cb}
	ao := &appendOnly{kv: kv}
	same("cache not Direct", steps(t, m, f, ao, prompt, ids))
	if f.calls != 0 {
		t.Fatalf("cache not Direct: %d fused calls, want 0", f.calls)
	}

	d := devtest.NewCPU(t)
	qm := testmodel.Load(t, models.Load, "../../testdata/tiny-qwen3", d.Dev)
	f = &ropeAttender{CPUBackend: d.Backend.(*kernels.CPUBackend)}
	freshSteps(t, qm, f, prompt, ids)
	if f.calls != 0 {
		t.Fatalf("qwen3 fixture (q/k norms): %d fused calls, want none", f.calls)
	}
}
