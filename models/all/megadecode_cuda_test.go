//go:build cuda

package all_test

import (
	"math"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/models/llama"
)

// megaCounter is the CUDA backend counting the DecodeLayer calls that ran
// (the one-kernel layer, FT_DECODE_MEGA): every other op is the backend's
// own.
type megaCounter struct {
	*cudabackend.Backend
	ran int
}

func (c *megaCounter) DecodeLayer(a kernels.DecodeLayer) (bool, error) {
	ran, err := c.Backend.DecodeLayer(a)
	if ran {
		c.ran++
	}
	return ran, err
}

var _ kernels.DecodeLayerer = (*megaCounter)(nil)

// closeLogits fails t unless got has want's rows, each within tol of the
// row's largest |logit| element by element.
func closeLogits(t *testing.T, what string, got, want [][]float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d rows of logits, want %d", what, len(got), len(want))
		return
	}
	for i := range want {
		top := 0.0
		for _, v := range want[i] {
			top = max(top, math.Abs(float64(v)))
		}
		if d := devtest.MaxAbsDiff(got[i], want[i]); !(d <= tol*top) {
			t.Errorf("%s, row %d: max |diff| %g > %g·%g", what, i, d, tol, top)
		}
	}
}

// megaBackend is d's CUDA backend where the one-kernel layer can run
// (compute capability 9.0), else t is skipped; DecodeMega is restored
// after t.
func megaBackend(t *testing.T, d devtest.Device) *cudabackend.Backend {
	t.Helper()
	gb, ok := d.Backend.(*cudabackend.Backend)
	if !ok {
		t.Skipf("the one-kernel layer is the CUDA backend's; %s has none", d.Name)
	}
	if gd, ok := d.Dev.(interface{ ComputeCapability() int }); !ok || gd.ComputeCapability() != 90 {
		t.Skip("the one-kernel layer runs on compute capability 9.0 only")
	}
	saved := gb.DecodeMega
	t.Cleanup(func() { gb.DecodeMega = saved })
	return gb
}

// megaCheckpoint writes a random Llama of the given depth whose heads are
// 128 wide (the tiny fixtures' 32 are declined by the one-kernel layer):
// D 256, I 512, 4 query heads on 2 KV heads; it returns its directory.
func megaCheckpoint(t *testing.T, layers int) string {
	t.Helper()
	cfg := llama.Shapes["deep-test"]
	cfg.HiddenSize, cfg.IntermediateSize, cfg.NumHiddenLayers = 256, 512, layers
	cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.HeadDim = 4, 2, 128
	dir := t.TempDir()
	if err := llama.MakeCheckpoint(dir, cfg, 11, 1<<30); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestDecodeMegaModelGPU: a random 2-layer Llama of head width 128 (the
// tiny fixtures' heads are 32 wide, which the one-kernel layer declines):
// with DecodeMega on, every layer of every eager one-token step and of the
// captured decode step runs as the one kernel; the logits of 6 eager steps
// and of 20 graph replays are within 2% of the largest logit of those with
// it off; and with it on, 20 greedy tokens replaying the graph are the
// eager ones.
func TestDecodeMegaModelGPU(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		gb := megaBackend(t, d)
		dir := megaCheckpoint(t, 2)
		m := load(t, dir, d.Dev)
		L := len(m.Layers)
		be := &megaCounter{Backend: gb}
		ab := decodeAB{t: t, m: m, be: be, prompt: []int32{5, 17, 42, 3, 9}, set: func(on bool) { gb.DecodeMega = on }}

		off := ab.eagerLogits(false, 6)
		if be.ran != 0 {
			t.Errorf("off: %d one-kernel layers ran", be.ran)
		}
		on := ab.eagerLogits(true, 6)
		if be.ran != L*6 {
			t.Errorf("eager: %d one-kernel layers ran, want one a layer and step = %d", be.ran, L*6)
		}
		closeLogits(t, "eager, one-kernel layer on against off", on, off, 0.02)

		goff := ab.graphLogits(false, 20)
		be.ran = 0
		gon := ab.graphLogits(true, 20)
		if be.ran != L {
			t.Errorf("graph: %d one-kernel layers ran in the capture, want one a layer = %d", be.ran, L)
		}
		// The greedy paths may part at a near tie; compare the replays up
		// to the first step whose token differs.
		n := len(gon)
		for i := range min(len(gon), len(goff)) {
			if slices.Index(gon[i], slices.Max(gon[i])) != slices.Index(goff[i], slices.Max(goff[i])) {
				n = i + 1
				break
			}
		}
		closeLogits(t, "graph, one-kernel layer on against off", gon[:n], goff[:n], 0.02)
		ab.graphTokensEager("one-kernel layer", true, 20)
	})
}
