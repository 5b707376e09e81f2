package all_test

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/host"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// slowHost is the host backend reporting a host so slow that the planner
// places nothing on it by itself: only Config.HostUnits go there.
type slowHost struct{ *host.Backend }

func (slowHost) HostBandwidth() float64 { return 1 }

// countedHost is slowHost counting the decode steps its one-op layer ran.
type countedHost struct {
	slowHost
	runs *atomic.Int64
}

func (c countedHost) DecodeLayer(a kernels.DecodeLayer) (bool, error) {
	ran, err := c.slowHost.DecodeLayer(a)
	if ran {
		c.runs.Add(1)
	}
	return ran, err
}

// TestHostPlacement: a model offloaded onto a CPU "device" with layer 1
// computed on the host (kernels/host on a CPU device of its own) and the
// others streamed (budget: one transfer block) or resident and streamed
// (budget: two units; Llama's 4 layers then have all three placements in
// one forward, the 3-layer fixtures resident and host) gives the resident
// greedy run's logits within 1e-5 and the same tokens, for every dense
// fixture family, with the host layer's decode steps as one op of one pool
// job (the default), of five jobs (FT_HOST_LAYER=jobs) and as separate ops
// (FT_HOST_LAYER=0).
func TestHostPlacement(t *testing.T) {
	for _, mode := range []string{"", "jobs", "0"} {
		t.Setenv("FT_HOST_LAYER", mode)
		for _, fx := range batchFixtures {
			for _, units := range []int64{1, 2} {
				t.Run(fmt.Sprintf("layer-%q/%s/budget-%d-units", mode, fx.family, units), func(t *testing.T) {
					runs := hostPlacement(t, fx.dir, fx.family, units)
					// Llama's and Mistral's layers are what the one op
					// describes; Qwen2's biases and Qwen3's q/k norms
					// make it decline; FT_HOST_LAYER=0 turns it off.
					want := mode != "0" && (fx.family == "llama" || fx.family == "mistral")
					if (runs > 0) != want {
						t.Errorf("the host layer's one op ran %d decode steps, want them run: %v", runs, want)
					}
				})
			}
		}
	}
}

// hostPlacement runs one case of TestHostPlacement and returns how many
// decode steps the host layer's one op ran.
func hostPlacement(t *testing.T, dir, family string, units int64) int64 {
	var runs atomic.Int64
	fx := struct{ dir, family string }{dir, family}
	{
		{
			prompt := []int32{3, 17, 42, 5, 9, 11, 2}
			const steps = 6
			hostDev, resident, want := residentRun(t, fx.dir, prompt, steps)

			unit, fixed, _ := unitBytes(t, resident)
			dev, cb := offloadDevice(t)
			defer dev.Close()
			cpuHost := runtime.NewCPUNamed("host", 0)
			defer cpuHost.Close()
			hbk, err := host.New(cpuHost, host.Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer hbk.Close()
			m := load(t, fx.dir, hostDev)
			name := fmt.Sprintf("%s-%s", t.Name(), fx.family)
			cfg := offload.DefaultConfig(dev)
			cfg.GPUBudget = offload.Budget{Bytes: fixed + units*unit}
			cfg.TransferBlocks = 1
			cfg.HostBackend = countedHost{slowHost{hbk}, &runs}
			cfg.HostUnits = []string{"model.layers.1"}
			cfg.OffloadTiming = offload.TimingEager
			_, release := offloadAs(t, m, &cfg, name)
			defer release()
			sb := strictBackend{cb, dev}
			// The first run passes discovery and profiling; the second
			// runs the three-way plan throughout.
			testmodel.Run(t, m, sb, prompt, steps)
			got := testmodel.Run(t, m, sb, prompt, steps)
			names := func(ns []offload.NamedModule) []string {
				var out []string
				for _, n := range ns {
					out = append(out, n.Name)
				}
				return out
			}
			hostU, streamed, res := names(offload.HostUnits(name)), names(offload.OffloadUnits(name)), names(offload.ResidentUnits(name))
			wantStreamed := units == 1 || len(resident.Layers) > 3
			if !slices.Equal(hostU, []string{"model.layers.1"}) || (len(streamed) > 0) != wantStreamed || (len(res) > 0) != (units > 1) {
				t.Fatalf("placement: host %v, streamed %v, resident %v", hostU, streamed, res)
			}
			for i := range want {
				if d := maxDiff(got[i], want[i]); d > 1e-5 {
					t.Fatalf("step %d: logits differ by %g", i, d)
				}
				if argmax(got[i]) != argmax(want[i]) {
					t.Fatalf("step %d: greedy token %d, want %d", i, argmax(got[i]), argmax(want[i]))
				}
			}
		}
	}
	return runs.Load()
}

func argmax(xs []float32) int {
	best := 0
	for i, x := range xs {
		if x > xs[best] {
			best = i
		}
	}
	return best
}
