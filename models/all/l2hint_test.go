package all_test

import (
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// hintCPU is the CPU backend with kernels.L2Hinter, recording each hint.
type hintCPU struct {
	*kernels.CPUBackend
	hints [][]*runtime.Tensor
}

func (b *hintCPU) HintL2(ts ...*runtime.Tensor) { b.hints = append(b.hints, ts) }

var _ kernels.L2Hinter = (*hintCPU)(nil)

// TestL2HintsCPU: on a backend that takes L2 hints, each one-token decode
// step hints, layer by layer, that layer's gate and up weights (never for
// the prompt's rows), and the logits are those without hints, bit for bit.
func TestL2HintsCPU(t *testing.T) {
	host := runtime.NewCPU(0)
	defer host.Close()
	cpuB, err := kernels.NewCPUBackend(host)
	if err != nil {
		t.Fatal(err)
	}
	m, run := fp8Steps(t, fp8FixtureDirs[0], host)
	want := run(cpuB)
	b := &hintCPU{CPUBackend: cpuB}
	sameStepLogits(t, "with L2 hints", "without", run(b), want)
	L := m.Cfg.NumHiddenLayers
	if len(b.hints) != L*fp8StepCount {
		t.Fatalf("%d hints, want %d (a layer a one-token step, none for the prompt)", len(b.hints), L*fp8StepCount)
	}
	for i, h := range b.hints {
		mlp := m.Layers[i%L].MLP
		if len(h) != 2 || h[0] != mlp.Gate.Weight.Tensor() || h[1] != mlp.Up.Weight.Tensor() {
			t.Errorf("hint %d (layer %d): %v, want the layer's gate and up weights", i, i%L, h)
		}
	}
}
