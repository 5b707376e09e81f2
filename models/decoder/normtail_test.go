package decoder_test

import (
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// tailer gives the CPU backend kernels.MatMulAdder (adder) and
// kernels.MatMulAddNormer through the reference (MatMulAdd, then RMSNorm),
// declining while decline is set, and counts the fused calls and every
// RMSNorm (its own and the decoder's).
type tailer struct {
	adder
	tails, norms int
	decline      bool
}

func (f *tailer) MatMulAddNorm(y, x, w, out, nw *runtime.Tensor, eps float32) (bool, error) {
	if f.decline {
		return false, nil
	}
	f.tails++
	if err := f.adder.MatMulAdd(y, x, w); err != nil {
		return false, err
	}
	return true, f.adder.Backend.RMSNorm(out, y, nw, eps)
}

func (f *tailer) RMSNorm(out, x, w *runtime.Tensor, eps float32) error {
	f.norms++
	return f.adder.Backend.RMSNorm(out, x, w, eps)
}

// TestNormTail: on a backend with MatMulAddNormer, every one-token step's
// o_proj and down_proj also leave the norm after them (2 fused calls a
// layer, and of all the norms of a step only the first layer's input norm
// still runs on its own), a prefill only in its last layer, which runs on
// the last row past attention (lastrows.go), and the logits are exactly
// those of MatMulAdd then RMSNorm. A hook watching one post-attention norm
// leaves that layer's o_proj unfused and, the tree now having hooks, every
// down_proj (their norms belong to the next layer); a backend that
// declines gets the same logits through the unfused ops.
func TestNormTail(t *testing.T) {
	m, b, _ := loadTiny(t)
	prompt, ids := []int32{5, 17, 42, 3}, []int32{7, 8, 9}
	run := func(be kernels.Backend) [][]float32 { return freshSteps(t, m, be, prompt, ids) }
	same := func(what string, got, want [][]float32) {
		t.Helper()
		for i := range want {
			if !slices.Equal(got[i], want[i]) {
				t.Fatalf("%s, forward %d: logits differ from MatMulAdd then RMSNorm", what, i)
			}
		}
	}
	want := run(&adder{Backend: b})
	L, decodes := len(m.Layers), len(ids)
	// the prefill's norms less the ones its last layer's tails make, then each step's
	normsOf := func(prefillTails, perStep int) int { return (2*L + 1 - prefillTails) + decodes*perStep }

	f := &tailer{adder: adder{Backend: b}}
	same("fused", run(f), want)
	if f.tails != 2*L*decodes+2 {
		t.Errorf("%d fused calls, want 2 a layer and one-token step and the prefill's last layer's 2 = %d", f.tails, 2*L*decodes+2)
	}
	if f.norms != normsOf(2, 1) {
		t.Errorf("%d RMSNorm calls, want %d (the prefill's %d, then only layer 0's input norm a step)", f.norms, normsOf(2, 1), 2*L-1)
	}
	if n := f.calls - f.tails; n != 2*L-2 { // the reference's fused op counts a MatMulAdd too
		t.Errorf("%d MatMulAdd calls outside the fused op, want %d (the prefill's but its last layer's)", n, 2*L-2)
	}

	remove := m.Tree().AddHook(watchOne{m: m.Layers[1].PostNorm})
	f = &tailer{adder: adder{Backend: b}}
	got := run(f)
	remove()
	same("post norm of layer 1 watched", got, want)
	if L < 3 {
		t.Fatalf("%d layers: the watched layer 1 must not be the last", L)
	}
	if f.tails != (L-1)*decodes+1 {
		t.Errorf("post norm of layer 1 watched: %d fused calls, want the other layers' o_proj and the prefill's last = %d", f.tails, (L-1)*decodes+1)
	}
	if f.norms != normsOf(1, L+2) {
		t.Errorf("post norm of layer 1 watched: %d RMSNorm calls, want %d", f.norms, normsOf(1, L+2))
	}

	f = &tailer{adder: adder{Backend: b}, decline: true}
	same("declined", run(f), want)
	if f.tails != 0 || f.calls != 2*L*(1+decodes) || f.norms != normsOf(0, 2*L+1) {
		t.Errorf("declined: %d fused, %d MatMulAdd, %d RMSNorm calls; want 0, %d, %d", f.tails, f.calls, f.norms, 2*L*(1+decodes), normsOf(0, 2*L+1))
	}
}

var _ kernels.MatMulAddNormer = (*tailer)(nil)
