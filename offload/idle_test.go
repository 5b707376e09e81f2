package offload_test

import (
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestInnerTrapsIdle: the engine says its units' traps are idle (nn.Idler)
// only inside an INFERENCE forward of a plan that keeps every unit
// resident and measures nothing: not in DISCOVERY or PROFILING, not when
// the plan streams units, not with offload timing on, not outside a
// forward, and not after Release (no hooks left).
func TestInnerTrapsIdle(t *testing.T) {
	const passes = 6
	for _, c := range []struct {
		name   string
		budget int64
		timing offload.TimingMode
		want   []bool
	}{
		{"all resident", 1 << 20, offload.TimingOff, []bool{false, false, false, true, true, true}},
		{"streamed", 2 * seedDim * seedDim * 4, offload.TimingOff, make([]bool, passes)},
		{"timed", 1 << 20, offload.TimingEager, make([]bool, passes)},
	} {
		t.Run(c.name, func(t *testing.T) {
			host, dev := runtime.NewCPU(0), runtime.NewCPU(0)
			m := newSeedModel(t, host, 4, 1)
			name := uniqueName(t)
			cfg := offload.DefaultConfig(dev)
			cfg.Include = []string{"blocks.*"}
			cfg.GPUBudget = offload.Budget{Bytes: c.budget}
			cfg.TransferBlocks = 2
			cfg.OffloadTiming = c.timing
			if err := offload.Offload(m, &cfg, name); err != nil {
				t.Fatal(err)
			}
			k, _ := kernels.NewCPUBackend(dev)
			if err := m.PlaceBuffers(dev); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < passes; i++ {
				if _, err := m.Forward(k, seedInput); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(m.idle, c.want) {
				t.Errorf("idle in the forwards %v, want %v (resident units %d)", m.idle, c.want, len(offload.ResidentUnits(name)))
			}
			if m.Node().Tree().InnerTrapsIdle() {
				t.Error("idle outside a forward")
			}
			if err := offload.Release(name, true); err != nil {
				t.Fatal(err)
			}
			m.idle = nil
			if _, err := m.Forward(k, seedInput); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(m.idle, []bool{false}) {
				t.Errorf("after Release: idle %v, want [false] (no hooks)", m.idle)
			}
		})
	}
}
