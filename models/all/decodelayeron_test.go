package all_test

import (
	"testing"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
)

// switchedLayer is a backend whose one-op decode layer is switched on or
// off (kernels.DecodeLayerer.DecodeLayerOn) and always declines, counting
// the DecodeLayer calls it was asked.
type switchedLayer struct {
	kernels.Backend
	on    bool
	calls *int
}

func (s switchedLayer) DecodeLayerOn() bool { return s.on }

func (s switchedLayer) DecodeLayer(kernels.DecodeLayer) (bool, error) {
	*s.calls++
	return false, nil
}

// TestDecodeLayerOnSkips: the decoder asks DecodeLayerOn first: with the op
// switched off it never builds DecodeLayer's operands nor calls it, with it
// on it asks once a decode step's layer; both give the plain run's logits.
func TestDecodeLayerOnSkips(t *testing.T) {
	dev, b := cpu(t)
	m := load(t, "../../testdata/tiny-llama", dev)
	prompt := []int32{3, 17, 42, 5}
	const steps = 4
	want := testmodel.Run(t, m, b, prompt, steps)
	for _, on := range []bool{false, true} {
		calls := 0
		got := testmodel.Run(t, m, switchedLayer{b, on, &calls}, prompt, steps)
		closeRows(t, got, want)
		if layers := len(m.Layers); on && calls < (steps-1)*layers || !on && calls != 0 {
			t.Errorf("on %v: DecodeLayer asked %d times (%d layers, %d steps)", on, calls, layers, steps)
		}
	}
}

// closeRows fails t unless got has want's rows with the same values.
func closeRows(t *testing.T, got, want [][]float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d rows of logits, want %d", len(got), len(want))
	}
	for i := range want {
		if d := maxDiff(got[i], want[i]); d != 0 {
			t.Fatalf("row %d differs by %g", i, d)
		}
	}
}
