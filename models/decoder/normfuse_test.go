package decoder_test

import (
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// normProjector gives the CPU backend (with MatMulAdder) kernels.NormProjector
// through the reference ops (RMSNorm into a scratch, then the products),
// counting the calls; decline makes every call decline.
type normProjector struct {
	adder
	qkv, gateUp, head int
	decline           bool
}

// normed runs RMSNorm(x)·nw into a fresh activation scratch.
func (p *normProjector) normed(x, nw *runtime.Tensor, eps float32) (*runtime.Tensor, error) {
	h, err := runtime.NewTensor(p.Device(), p.ActDType(), x.Shape(), "test scratch")
	if err != nil {
		return nil, err
	}
	return h, p.RMSNorm(h, x, nw, eps)
}

func (p *normProjector) NormMatMulN(outs []*runtime.Tensor, x, nw *runtime.Tensor, eps float32, ws []*runtime.Tensor) (bool, error) {
	if p.decline {
		return false, nil
	}
	p.qkv++
	h, err := p.normed(x, nw, eps)
	if err != nil {
		return false, err
	}
	defer h.Buffer().Free()
	for i := range ws {
		if err := p.MatMul(outs[i], h, ws[i]); err != nil {
			return false, err
		}
	}
	return true, nil
}

func (p *normProjector) NormGateUpSiLU(out, x, nw *runtime.Tensor, eps float32, wg, wu *runtime.Tensor) (bool, error) {
	if p.decline {
		return false, nil
	}
	p.gateUp++
	h, err := p.normed(x, nw, eps)
	if err != nil {
		return false, err
	}
	defer h.Buffer().Free()
	u, err := runtime.NewTensor(p.Device(), p.ActDType(), out.Shape(), "test scratch")
	if err != nil {
		return false, err
	}
	defer u.Buffer().Free()
	if err := p.MatMul(out, h, wg); err != nil {
		return false, err
	}
	if err := p.MatMul(u, h, wu); err != nil {
		return false, err
	}
	return true, p.SiLUMul(out, out, u)
}

func (p *normProjector) NormMatMul(out, x, nw *runtime.Tensor, eps float32, w *runtime.Tensor) (bool, error) {
	if p.decline {
		return false, nil
	}
	p.head++
	h, err := p.normed(x, nw, eps)
	if err != nil {
		return false, err
	}
	defer h.Buffer().Free()
	return true, p.MatMul(out, h, w)
}

var _ kernels.NormProjector = (*normProjector)(nil)

// TestFoldedNorms: on a backend with kernels.NormProjector every one-token
// step folds each layer's two norms into the q/k/v and gate·up·SiLU
// projections (none for the prefill's layers but the last one's gate·up,
// past attention on the last row alone: lastrows.go) and the final norm into the
// LM head (every forward: only the last row's logits are made), with the
// logits of the unfused path; a backend that declines falls back
// to the norm and the plain ops, and a hook watching a norm keeps that norm
// unfolded.
func TestFoldedNorms(t *testing.T) {
	m, b, _ := loadTiny(t)
	prompt, ids := []int32{5, 17, 42, 3}, []int32{7, 8, 9}
	run := func(be kernels.Backend) [][]float32 { return freshSteps(t, m, be, prompt, ids) }
	want := run(&adder{Backend: b})
	same := func(what string, got [][]float32) {
		t.Helper()
		for i := range want {
			if !slices.Equal(want[i], got[i]) {
				t.Fatalf("%s: forward %d: logits differ from the unfused path", what, i)
			}
		}
	}
	L := len(m.Layers)
	p := &normProjector{adder: adder{Backend: b}}
	same("folded", run(p))
	// gate·up also in the prompt's last layer, which goes on past attention
	// with the last row alone (lastrows.go)
	if p.qkv != L*len(ids) || p.gateUp != L*len(ids)+1 || p.head != 1+len(ids) {
		t.Fatalf("folded: %d q/k/v, %d gate·up, %d head calls; want %d, %d, %d", p.qkv, p.gateUp, p.head, L*len(ids), L*len(ids)+1, 1+len(ids))
	}

	p = &normProjector{adder: adder{Backend: b}, decline: true}
	same("declined", run(p))

	remove := m.Tree().AddHook(watchOne{m: m.Layers[0].InputNorm})
	p = &normProjector{adder: adder{Backend: b}}
	got := run(p)
	remove()
	same("input norm of layer 0 watched", got)
	if p.qkv != (L-1)*len(ids) || p.gateUp != L*len(ids)+1 {
		t.Fatalf("input norm of layer 0 watched: %d q/k/v, %d gate·up calls; want %d, %d", p.qkv, p.gateUp, (L-1)*len(ids), L*len(ids)+1)
	}
}
