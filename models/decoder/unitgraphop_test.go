package decoder_test

import (
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/host"
	"github.com/flextensor-go/flextensor/models/decoder"
)

// layerCapturer is fakeCapturer over the host backend with its one-op
// decode layer switched by on, counting the layers the op ran.
type layerCapturer struct {
	fakeCapturer
	hb  *host.Backend
	on  bool
	ran int
}

func (c *layerCapturer) DecodeLayerOn() bool { return c.on && c.hb.DecodeLayerOn() }

func (c *layerCapturer) DecodeLayer(a kernels.DecodeLayer) (bool, error) {
	if !c.on {
		return false, nil
	}
	ran, err := c.hb.DecodeLayer(a)
	if ran {
		c.ran++
	}
	return ran, err
}

// TestUnitGraphsDecodeLayerSwitch: a per-layer graph holds the layer as
// one DecodeLayer op when the backend has it switched on, and switching it
// on or off after a capture recaptures every layer (the graph key), so no
// layer keeps replaying what it captured under the other setting; the
// replays give the eager reference's logits (up to the host kernels'
// summation order).
func TestUnitGraphsDecodeLayerSwitch(t *testing.T) {
	m, b, dev := loadTiny(t)
	hb, err := host.New(dev, host.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer hb.Close()
	if !hb.DecodeLayerOn() {
		t.Skip("the host backend's one-op layer is off here (no fast kernels)")
	}
	prompt, ids := []int32{5, 17, 42}, []int32{7, 8, 9, 10, 11}
	cache, _ := m.NewKVCache(b, len(prompt)+len(ids))
	defer cache.Free()
	want := steps(t, m, b, cache, prompt, ids)

	lc := &layerCapturer{fakeCapturer: fakeCapturer{Backend: hb}, hb: hb}
	compile := decoder.UnitGraphs(lc)
	for _, l := range m.Layers {
		if err := compile(l); err != nil {
			t.Fatal(err)
		}
	}
	defer m.DropUnitGraphs()
	L := len(m.Layers)
	all := func(n int) []int { return slices.Repeat([]int{n}, L) }
	cache.Reset()
	got := steps(t, m, lc, cache, prompt, ids[:2]) // off: op by op
	if c := m.GraphCaptures(); !slices.Equal(c, all(1)) || lc.ran != 0 {
		t.Fatalf("off: captures %v, one-op layers %d: want one capture a layer and no op", c, lc.ran)
	}
	lc.on = true
	got = append(got, steps(t, m, lc, cache, ids[2:3], ids[3:5])...) // on: 3 one-token forwards
	if c := m.GraphCaptures(); !slices.Equal(c, all(2)) || lc.ran != 3*L {
		t.Fatalf("switched on: captures %v, one-op layers %d: want every layer recaptured and %d ops", c, lc.ran, 3*L)
	}
	lc.on = false
	cache.Reset()
	off := steps(t, m, lc, cache, prompt, ids[:1])
	if c := m.GraphCaptures(); !slices.Equal(c, all(3)) || lc.ran != 3*L {
		t.Fatalf("switched off: captures %v, one-op layers %d: want every layer recaptured and no more ops", c, lc.ran)
	}
	if !slices.Equal(off[1], got[1]) {
		t.Errorf("switched off again: logits differ from the op-by-op replay before")
	}
	for i := range want {
		top := 0.0
		for _, v := range want[i] {
			top = max(top, float64(v)*float64(v))
		}
		if d := devtest.MaxAbsDiff(got[i], want[i]); d*d > 1e-8*top {
			t.Errorf("forward %d: max |diff| %g from the eager forward", i, d)
		}
	}
}
