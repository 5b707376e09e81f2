package all_test

import (
	"testing"

	"github.com/flextensor-go/flextensor/offload"
)

// TestHostBlockRatesResident: every layer's block is rated when packed,
// but a layer the plan makes resident frees its host block: the manager
// reports rates for the streamed and host layers only (a freed block's
// rate would count in the fastest rate and the traces).
func TestHostBlockRatesResident(t *testing.T) {
	fx := batchFixtures[0] // llama: 4 layers
	prompt := []int32{3, 17, 42, 5}
	const steps = 3
	hostDev, resident, want := residentRun(t, fx.dir, prompt, steps)
	unit, _, _ := unitBytes(t, resident)
	dev, cb := offloadDevice(t)
	defer dev.Close()
	rh := newRatedHost(t, unit, 2e10, 1e10, 3e10, 4e10)
	cfg := hybridConfig(t, resident, dev, rh.Backend, 3) // one transfer block: some layers resident
	cfg.HostBackend, cfg.HostUnits = rh, nil
	name := "host-block-rates-resident"
	m := load(t, fx.dir, hostDev)
	mgr, release := offloadAs(t, m, &cfg, name)
	defer release()
	var res []string
	var rates map[string]float64
	seen := false
	got := generate(t, m, cb, prompt, steps, func(int) {
		if !seen && mgr.Phase() == offload.PhaseInference {
			seen, res, rates = true, unitNames(mgr.ResidentUnits()), mgr.HostBlockRates()
		}
	})
	matchResident(t, got, want)
	if !seen {
		t.Fatal("no INFERENCE pass")
	}
	if calls := *rh.calls; calls < 4 {
		t.Fatalf("%d blocks rated, want the 4 layers'", calls)
	}
	if len(res) == 0 || len(res) == 4 {
		t.Fatalf("resident layers %q: the test wants some resident and some streamed", res)
	}
	for _, n := range res {
		if r, ok := rates[n]; ok {
			t.Errorf("resident %s keeps its freed block's rate %g", n, r)
		}
	}
	if len(rates) != 4-len(res) {
		t.Errorf("rates %v for %d streamed or host layers", rates, 4-len(res))
	}
}
