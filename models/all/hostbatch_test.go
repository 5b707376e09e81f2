package all_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/offload"
)

// The decoder tells the engine which forwards can compute host units (a
// compile-time check: without it a batched forward under a three-way plan
// would fail at its first host unit).
var _ offload.PlacementAsker = (*decoder.Model)(nil)

// TestBatchHostFree: a model offloaded with a host backend fast enough
// that the planner computes layers on the host (every layer streams, a
// budget of one transfer block) decodes one sequence under that three-way
// plan; batched forwards (ForwardBatch: sequences of mixed lengths joining
// and finishing at different steps) then run under plans with no layer on
// the host and give each sequence's logits run alone within 1e-5, with
// every KV block returned; single-sequence decoding afterwards switches
// back to the plan with host layers and still gives the resident run's
// logits. For every dense family.
func TestBatchHostFree(t *testing.T) {
	for _, fx := range batchFixtures {
		t.Run(fx.family, func(t *testing.T) {
			prompt := []int32{3, 17, 42, 5}
			const steps = 8
			hostDev, rb := cpu(t)
			resident := load(t, fx.dir, hostDev)
			want := testmodel.Run(t, resident, rb, prompt, steps)
			ps := plans(resident.Cfg.VocabSize)
			wantBatch := runAlone(t, resident, rb, ps)

			unit, _, _ := unitBytes(t, resident)
			dev, cb := offloadDevice(t)
			defer dev.Close()
			rh := newRatedHost(t, unit, 1e13) // every layer 1 µs a token on the host
			cfg := hybridConfig(t, resident, dev, rh.Backend, 1)
			cfg.HostBackend, cfg.HostUnits = &rh, nil // a pointer: the decoder compares backends
			lines := collectTrace(&cfg)
			name := fmt.Sprintf("%s-%s", t.Name(), fx.family)
			m := load(t, fx.dir, hostDev)
			mgr, release := offloadAs(t, m, &cfg, name)
			defer release()
			sb := strictBackend{cb, dev}

			matchResident(t, generate(t, m, sb, prompt, steps, nil), want)
			if len(mgr.HostUnits()) == 0 {
				t.Fatalf("the single-sequence plan computes no layer on the host: %v", lines())
			}
			cache, err := m.NewPagedCache(sb, 64, 4)
			if err != nil {
				t.Fatal(err)
			}
			defer cache.Close()
			checkBatched(t, runBatched(t, m, sb, cache, ps), wantBatch)
			if cache.FreeBlocks() != cache.TotalBlocks() || cache.LiveSeqs() != 0 {
				t.Errorf("after the batched run: %d of %d blocks free, %d sequences live", cache.FreeBlocks(), cache.TotalBlocks(), cache.LiveSeqs())
			}
			st := mgr.TokenPlans()
			if h := unitNames(mgr.HostUnits()); len(h) != 0 || !st.HostFree || len(st.FreeBuckets) == 0 {
				t.Fatalf("after the batched run: host units %v, token plans %+v; want none on the host under a host-free bucket's plan", h, st)
			}
			all := strings.Join(lines(), "\n")
			if !strings.Contains(all, "with no host unit (forwards that cannot compute host units)") {
				t.Errorf("no trace of the switch to a host-free plan:\n%s", all)
			}

			matchResident(t, generate(t, m, sb, prompt, steps, nil), want)
			if st := mgr.TokenPlans(); len(mgr.HostUnits()) == 0 || st.HostFree {
				t.Fatalf("after single-sequence steps again: host units %v, token plans %+v; want the three-way plan back", unitNames(mgr.HostUnits()), st)
			}
		})
	}
}

// TestBatchForcedHost: with a layer forced onto the host (Config.HostUnits)
// a batched forward is an error naming the layer and the setting; the
// sequence it carried is unharmed (its blocks free again), and
// single-sequence decoding still gives the resident run's logits.
func TestBatchForcedHost(t *testing.T) {
	fx := batchFixtures[0]
	prompt := []int32{3, 17, 42, 5}
	const steps = 3
	hostDev, resident, want := residentRun(t, fx.dir, prompt, steps)
	dev, cb := offloadDevice(t)
	defer dev.Close()
	cfg := hybridConfig(t, resident, dev, hostBackend(t), 1) // model.layers.1 on the host
	m := load(t, fx.dir, hostDev)
	_, release := offloadAs(t, m, &cfg, "batch-forced-host")
	defer release()
	sb := strictBackend{cb, dev}
	matchResident(t, generate(t, m, sb, prompt, steps, nil), want)

	cache, err := m.NewPagedCache(sb, 64, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	seq := cache.NewSeq()
	_, err = m.ForwardBatch(sb, cache, []decoder.BatchEntry{{Seq: seq, IDs: prompt}})
	if err == nil || !strings.Contains(err.Error(), "model.layers.1") || !strings.Contains(err.Error(), "Config.HostUnits") {
		t.Fatalf("batched forward with a forced host layer: %v; want an error naming model.layers.1 and Config.HostUnits", err)
	}
	if seq.Len() != 0 {
		t.Errorf("the failed forward left %d positions in its sequence", seq.Len())
	}
	seq.Free()
	if cache.FreeBlocks() != cache.TotalBlocks() {
		t.Errorf("%d of %d blocks free after the failed forward", cache.FreeBlocks(), cache.TotalBlocks())
	}
	matchResident(t, generate(t, m, sb, prompt, steps, nil), want)
}
