package all_test

import (
	"sync"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestHostBlockRatesResident: every layer's block is rated when packed,
// but a layer the plan makes resident frees its host block: the manager
// reports rates for the streamed and host layers only (a freed block's
// rate would count in the fastest rate and the traces).
func TestHostBlockRatesResident(t *testing.T) {
	fx := batchFixtures[0] // llama: 4 layers
	hostDev, cb0 := cpu(t)
	resident := load(t, fx.dir, hostDev)
	prompt := []int32{3, 17, 42, 5}
	const steps = 3
	want := testmodel.Run(t, resident, cb0, prompt, steps)
	unit, _, _ := unitBytes(t, resident)
	dev := runtime.NewCPU(0)
	defer dev.Close()
	cb, err := kernels.NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	rh := ratedHost{Backend: hostBackend(t), bw: float64(unit) / 1e-6, rates: []float64{2e10, 1e10, 3e10, 4e10},
		mu: &sync.Mutex{}, calls: &calls}
	cfg := hybridConfig(t, resident, dev, rh.Backend, 3) // one transfer block: some layers resident
	cfg.HostBackend, cfg.HostUnits = rh, nil
	name := "host-block-rates-resident"
	m := load(t, fx.dir, hostDev)
	if err := offload.Offload(m, &cfg, name); err != nil {
		t.Fatal(err)
	}
	defer offload.Release(name, true)
	mgr := offload.GetOffloadManager(name)
	var res []string
	var rates map[string]float64
	seen := false
	cache, err := m.NewKVCache(cb, len(prompt)+steps)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Free()
	got, err := testmodel.Steps(m, cb, cache, prompt, steps, func(step int, logits []float32) int32 {
		if !seen && mgr.Phase() == offload.PhaseInference {
			seen, res, rates = true, unitNames(mgr.ResidentUnits()), mgr.HostBlockRates()
		}
		return testmodel.Argmax(step, logits)
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if d := maxDiff(got[i], want[i]); d > 1e-5 {
			t.Fatalf("step %d: logits differ by %g", i, d)
		}
	}
	if !seen {
		t.Fatal("no INFERENCE pass")
	}
	if calls < 4 {
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
