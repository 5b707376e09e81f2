package all_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/host"
	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// hostBackend is kernels/host on a CPU device of its own, closed by a
// cleanup.
func hostBackend(t *testing.T) *host.Backend {
	t.Helper()
	return hostBackendPasses(t, 0)
}

// hybridConfig offloads onto dev under a budget of the fixed weights and
// units layers, one transfer block, layer 1 forced onto the host.
func hybridConfig(t *testing.T, resident *decoder.Model, dev runtime.Device, hb kernels.Backend, units int64) offload.Config {
	unit, fixed, _ := unitBytes(t, resident)
	cfg := offload.DefaultConfig(dev)
	cfg.GPUBudget = offload.Budget{Bytes: fixed + units*unit}
	cfg.TransferBlocks = 1
	cfg.HostBackend = slowHost{hb.(*host.Backend)}
	cfg.HostUnits = []string{"model.layers.1"}
	return cfg
}

func unitNames(ns []offload.NamedModule) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Name)
	}
	return out
}

// TestHostPlacementProfile: a three-way plan (layer 1 on the host, others
// resident and streamed) saved with SaveProfile records the host units,
// loads back (models.LoadFromProfile with a host backend) with the same
// placement and gives the resident run's logits within 1e-5; without a
// host backend loading fails naming the missing host backend; a profile
// whose host unit is also resident fails validation.
func TestHostPlacementProfile(t *testing.T) {
	for _, fx := range batchFixtures {
		t.Run(fx.family, func(t *testing.T) {
			prompt := []int32{3, 17, 42, 5, 9, 11, 2}
			const steps = 4
			hostDev, resident, want := residentRun(t, fx.dir, prompt, steps)

			dev, cb := offloadDevice(t)
			defer dev.Close()
			hb := hostBackend(t)
			cfg := hybridConfig(t, resident, dev, hb, 2)
			name := "host-profile-" + fx.family
			m := load(t, fx.dir, hostDev)
			if err := offload.Offload(m, &cfg, name); err != nil {
				t.Fatal(err)
			}
			testmodel.Run(t, m, cb, prompt, steps) // discovery, profiling, INFERENCE
			hostU, res := unitNames(offload.HostUnits(name)), unitNames(offload.ResidentUnits(name))
			pdir := t.TempDir()
			if err := offload.SaveProfile(pdir, name); err != nil {
				t.Fatal(err)
			}
			if err := offload.Release(name, true); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(hostU, []string{"model.layers.1"}) {
				t.Fatalf("host units %v before saving", hostU)
			}
			st, err := offload.ReadProfile(pdir)
			if err != nil {
				t.Fatal(err)
			}
			if n := countHost(st.Plan.Host); n != 1 || !st.Plan.Host[1] {
				t.Fatalf("saved plan's host flags %v, want unit 1 only", st.Plan.Host)
			}

			// Loading without a host backend names what is missing.
			bare := offload.DefaultConfig(dev)
			if _, _, err := models.LoadFromProfile(fx.dir, st, bare, name+"-bare", true); err == nil || !strings.Contains(err.Error(), "host backend") {
				t.Fatalf("loading a three-way profile without a host backend: %v", err)
			}
			// A host unit that is resident too is refused.
			bad := *st
			bad.Plan.Resident = slices.Clone(st.Plan.Resident)
			bad.Plan.Resident[1] = true
			if err := bad.Validate(m); err == nil || !strings.Contains(err.Error(), "both resident and computed on the host") {
				t.Fatalf("validating a host unit that is resident: %v", err)
			}

			lcfg := offload.DefaultConfig(dev)
			lcfg.HostBackend = hb
			pname := name + "-loaded"
			pm, pck, err := models.LoadFromProfile(fx.dir, st, lcfg, pname, true)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := offload.Release(pname, true); err != nil {
					t.Error(err)
				}
				pm.Close()
				pck.Close()
			}()
			if got := unitNames(offload.HostUnits(pname)); !slices.Equal(got, hostU) {
				t.Fatalf("host units after loading %v, want %v", got, hostU)
			}
			if got := unitNames(offload.ResidentUnits(pname)); !slices.Equal(got, res) {
				t.Fatalf("resident units after loading %v, want %v", got, res)
			}
			matchResident(t, testmodel.Run(t, pm, strictBackend{cb, dev}, prompt, steps), want)
		})
	}
}

func countHost(hs []bool) int {
	n := 0
	for _, h := range hs {
		if h {
			n++
		}
	}
	return n
}

// TestHostPlacementDevice: TestHostPlacement's forward on each device of
// devtest.Each — the main device (the CPU, then cuda:0 in a cuda build)
// holds the resident and streamed layers, layer 1 is computed by
// kernels/host on a CPU device of its own — equals the CPU reference run
// within the device's tolerance (devtest.CPUTol, devtest.CUDATol) for every
// dense fixture family, under budgets of one and two layers.
func TestHostPlacementDevice(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		for _, fx := range batchFixtures {
			for _, units := range []int64{1, 2} {
				t.Run(fmt.Sprintf("%s/budget-%d-units", fx.family, units), func(t *testing.T) {
					hostDev, cb := cpu(t)
					resident := load(t, fx.dir, hostDev)
					prompt := []int32{3, 17, 42, 5, 9, 11, 2}
					const steps = 5
					want := testmodel.Run(t, resident, cb, prompt, steps)

					hb := hostBackend(t)
					cfg := hybridConfig(t, resident, d.Dev, hb, units)
					name := fmt.Sprintf("host-device-%s-%s-%d", d.Name, fx.family, units)
					m := load(t, fx.dir, hostDev)
					if err := offload.Offload(m, &cfg, name); err != nil {
						t.Fatal(err)
					}
					defer func() {
						if err := offload.Release(name, true); err != nil {
							t.Error(err)
						}
					}()
					testmodel.Run(t, m, d.Backend, prompt, steps) // discovery and profiling
					got := testmodel.Run(t, m, d.Backend, prompt, steps)
					if hostU := unitNames(offload.HostUnits(name)); !slices.Equal(hostU, []string{"model.layers.1"}) {
						t.Fatalf("host units %v, want layer 1", hostU)
					}
					for i := range want {
						if !devtest.Close(t, got[i], want[i], d.Tol.Abs, d.Tol.Rel) {
							t.Fatalf("step %d: logits of %s with a host layer differ from the CPU reference", i, d.Name)
						}
					}
				})
			}
		}
	})
}

// TestHostPlacementTiming: the offload timing report of a three-way plan
// has the host unit's row placed "host" with a positive host wall time (and
// no device transfer), counts it apart from resident and streamed units,
// and its table shows the host column.
func TestHostPlacementTiming(t *testing.T) {
	// The shared-read model is off by default; measured here so that the
	// report's DRAM lines are checked.
	t.Setenv("FT_HOST_DRAM_GBPS", "measure")
	fx := batchFixtures[0] // llama: 4 layers, all three placements
	hostDev, _ := cpu(t)
	resident := load(t, fx.dir, hostDev)
	dev, cb := offloadDevice(t)
	defer dev.Close()
	cfg := hybridConfig(t, resident, dev, hostBackend(t), 2)
	cfg.OffloadTiming = offload.TimingEager
	const name = "host-timing"
	m := load(t, fx.dir, hostDev)
	_, release := offloadAs(t, m, &cfg, name)
	defer release()
	prompt := []int32{3, 17, 42, 5}
	testmodel.Run(t, m, cb, prompt, 3)
	if _, err := offload.CollectOffloadTiming(name); err != nil { // drop the passes before INFERENCE settled
		t.Fatal(err)
	}
	testmodel.Run(t, m, cb, prompt, 3)
	rep, err := offload.CollectOffloadTiming(name)
	if err != nil || rep == nil {
		t.Fatalf("timing report: %v, %v", rep, err)
	}
	if rep.HostUnits != 1 || rep.ResidentUnits+rep.StreamedUnits+rep.HostUnits != len(resident.Layers) || rep.StreamedUnits == 0 || rep.ResidentUnits == 0 {
		t.Fatalf("report counts %d resident, %d streamed, %d host of %d layers", rep.ResidentUnits, rep.StreamedUnits, rep.HostUnits, len(resident.Layers))
	}
	var hostRow *offload.TrapTimingStats
	for i, tr := range rep.Traps {
		if tr.Host {
			if hostRow != nil {
				t.Fatalf("two host rows: %s and %s", hostRow.Trap, tr.Trap)
			}
			hostRow = &rep.Traps[i]
		} else if len(tr.HostMs) > 0 {
			t.Fatalf("%s is not on the host but has host times %v", tr.Trap, tr.HostMs)
		}
	}
	if hostRow == nil || hostRow.Trap != "model.layers.1" || hostRow.Streamed || len(hostRow.HostMs) != hostRow.Passes || hostRow.MedianHostMs() <= 0 || hostRow.MedianTransferMs() != 0 {
		t.Fatalf("host row %+v", hostRow)
	}
	// In execution order: layer 1 between layers 0 and 2.
	var order []string
	for _, tr := range rep.Traps {
		order = append(order, tr.Trap)
	}
	if i := slices.Index(order, "model.layers.1"); i < 1 || order[i-1] != "model.layers.0" || order[i+1] != "model.layers.2" {
		t.Fatalf("rows in order %v", order)
	}
	table := offload.FormatOffloadTimingTable(rep)
	var line string
	for _, l := range strings.Split(table, "\n") {
		if strings.HasPrefix(l, "model.layers.1 ") {
			line = l
		}
	}
	if !strings.Contains(table, "host ms") || !strings.Contains(line, " host ") || !strings.Contains(table, "1 units computed on the host") {
		t.Fatalf("table lacks the host column or row:\n%s", table)
	}
	// The plan's host prediction under the shared-read model, with the
	// DRAM figure the host backend measured (slowHost's estimate is huge,
	// so beside the copies it runs as long as alone: its reads are slow).
	if rep.HostReadGBps <= 0 || rep.PredictedHostMs <= 0 || rep.PredictedHostMs < rep.PredictedHostSolo*(1-1e-9) || !strings.Contains(table, "shared with the copies") {
		t.Fatalf("host DRAM %v GB/s, host predicted %v ms (%v alone); table:\n%s", rep.HostReadGBps, rep.PredictedHostMs, rep.PredictedHostSolo, table)
	}
	t.Log("\n" + table)
}
