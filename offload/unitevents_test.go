package offload_test

import (
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestResidentUnitsRecordNoEvents: in INFERENCE a unit's exit records an
// event on the compute stream only where something needs it: every
// streamed unit (its slot is freed on it) and, in timed passes, every
// unit; a resident unit of an untimed pass records none (an event between
// two kernels breaks the dependent launch on the GPU). With the whole
// model resident and the timing off, one-token passes record no event at
// all; with the timing on, one a unit a pass; with the least budget, one a
// streamed unit a pass.
func TestResidentUnitsRecordNoEvents(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		compute := d.Backend
		if d.Kind() == runtime.KindCPU {
			compute = strictBackend{d.Backend, d.Dev}
		}
		probe, _ := hostModel(t, tinyDir)
		fp, err := offload.Measure(probe, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		units := len(fp.UnitBytes)
		prompt := []int32{5, 17, 42, 99}
		for _, c := range []struct {
			name   string
			budget int64
			timing offload.TimingMode
		}{
			{"resident", fp.TotalBytes, offload.TimingOff},
			{"resident timed", fp.TotalBytes, offload.TimingEager},
			{"least", fp.MinBudget(2), offload.TimingOff},
		} {
			t.Run(c.name, func(t *testing.T) {
				model, _ := hostModel(t, tinyDir)
				name := uniqueName(t)
				cfg := offload.DefaultConfig(d.Dev)
				cfg.GPUBudget = offload.Budget{Bytes: c.budget}
				cfg.TransferBlocks = 2
				cfg.OffloadTiming = c.timing
				if err := offload.Offload(model, &cfg, name); err != nil {
					t.Fatal(err)
				}
				defer func() {
					if err := offload.Release(name, false); err != nil {
						t.Error(err)
					}
				}()
				run(t, model, compute, prompt, 6) // discovery, profiling, the first INFERENCE passes
				if p := offload.GetOffloadManager(name).LastPass(); p.Phase != offload.PhaseInference {
					t.Fatalf("after 7 forwards the engine is in phase %v, want INFERENCE", p.Phase)
				}
				// Decode passes of one token, the size the plan was made
				// for (the prompt's pass, of another size, may be measured).
				cache, err := model.NewKVCache(compute, len(prompt)+8)
				if err != nil {
					t.Fatal(err)
				}
				defer cache.Free()
				if _, err := model.Forward(compute, cache, prompt, false); err != nil {
					t.Fatal(err)
				}
				before := offload.UnitEndEvents(name)
				const passes = 4
				for i := range passes {
					if _, err := model.Forward(compute, cache, []int32{int32(7 + i)}, false); err != nil {
						t.Fatal(err)
					}
				}
				got := offload.UnitEndEvents(name) - before
				resident, streamed := len(offload.ResidentUnits(name)), len(offload.OffloadUnits(name))
				switch {
				case c.timing != offload.TimingOff:
					if got != units*passes {
						t.Errorf("%d events in %d timed passes of %d units, want one a unit a pass", got, passes, units)
					}
				case streamed == 0:
					if got != 0 {
						t.Errorf("%d events in %d untimed passes with all %d units resident, want none", got, passes, resident)
					}
				default:
					if got != streamed*passes {
						t.Errorf("%d events in %d passes streaming %d of %d units, want one a streamed unit a pass", got, passes, streamed, units)
					}
				}
			})
		}
	})
}
