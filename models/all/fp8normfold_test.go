package all_test

import (
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// normFP8CPU is addCPU (the FP8 residual adds of the GPU's decode path)
// with kernels.FP8NormProjector through the reference ops: RMSNorm into a
// scratch, then the FP8 products; calls counted, every call declined with
// decline.
type normFP8CPU struct {
	addCPU
	decline     bool
	qkv, gateUp int
}

// normed runs RMSNorm(x)·nw into a fresh activation scratch.
func (b *normFP8CPU) normed(x, nw *runtime.Tensor, eps float32) (*runtime.Tensor, error) {
	h, err := runtime.NewTensor(b.Device(), b.ActDType(), x.Shape(), "test scratch")
	if err != nil {
		return nil, err
	}
	if err := b.RMSNorm(h, x, nw, eps); err != nil {
		h.Buffer().Free()
		return nil, err
	}
	return h, nil
}

func (b *normFP8CPU) NormMatMulNFP8(outs []*runtime.Tensor, x, nw *runtime.Tensor, eps float32, ws, scales []*runtime.Tensor, layout kernels.FP8Layout) (bool, error) {
	if b.decline {
		return false, nil
	}
	b.qkv++
	h, err := b.normed(x, nw, eps)
	if err != nil {
		return false, err
	}
	defer h.Buffer().Free()
	return true, b.MatMulNFP8(outs, h, ws, scales, layout)
}

func (b *normFP8CPU) NormGateUpSiLUFP8(out, x, nw *runtime.Tensor, eps float32, wg, wu, sg, su *runtime.Tensor, layout kernels.FP8Layout) (bool, error) {
	if b.decline {
		return false, nil
	}
	b.gateUp++
	h, err := b.normed(x, nw, eps)
	if err != nil {
		return false, err
	}
	defer h.Buffer().Free()
	up, err := runtime.NewTensor(b.Device(), b.ActDType(), out.Shape(), "test scratch")
	if err != nil {
		return false, err
	}
	defer up.Buffer().Free()
	return true, b.GateUpSiLUFP8(out, up, h, wg, wu, sg, su, layout)
}

var _ kernels.FP8NormProjector = (*normFP8CPU)(nil)

// TestFP8FoldedNormsCPU: on a backend with kernels.FP8NormProjector both
// FP8 fixtures' decode steps hand every layer's input norm to the q/k/v
// projection and its post-attention norm to gate·up·SiLU (never for the
// prompt's rows), with, bit for bit, the logits of the unfolded path (the
// fake runs the same ops); a backend that declines runs the norms itself
// with the same logits, and a hook watching one layer's input norm keeps
// that norm unfolded.
func TestFP8FoldedNormsCPU(t *testing.T) {
	host := runtime.NewCPU(0)
	defer host.Close()
	cpuB, err := kernels.NewCPUBackend(host)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range fp8FixtureDirs {
		t.Run(dir[len("../../testdata/"):], func(t *testing.T) {
			m, run := fp8Steps(t, dir, host)
			L, steps := m.Cfg.NumHiddenLayers, fp8StepCount
			want := run(&addCPU{CPUBackend: cpuB})
			check := func(what string, b *normFP8CPU, qkv, gateUp int) {
				t.Helper()
				sameStepLogits(t, what, "norm, then the FP8 ops", run(b), want)
				if b.qkv != qkv || b.gateUp != gateUp {
					t.Errorf("%s: %d folded q/k/v and %d gate·up calls, want %d and %d", what, b.qkv, b.gateUp, qkv, gateUp)
				}
			}
			// gate·up: the steps' and the prompt's last layer's, which goes on
			// past attention with the last row alone (models/decoder/lastrows.go)
			check("folded", &normFP8CPU{addCPU: addCPU{CPUBackend: cpuB}}, L*steps, L*steps+1)
			check("declined", &normFP8CPU{addCPU: addCPU{CPUBackend: cpuB}, decline: true}, 0, 0)
			remove := m.Tree().AddHook(watchModule{m.Layers[1].InputNorm})
			check("input norm of layer 1 watched", &normFP8CPU{addCPU: addCPU{CPUBackend: cpuB}}, (L-1)*steps, L*steps+1)
			remove()
		})
	}
}
