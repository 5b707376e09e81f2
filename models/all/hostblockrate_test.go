package all_test

import (
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/flextensor-go/flextensor/kernels/host"
	"github.com/flextensor-go/flextensor/offload"
)

// The engine rates blocks through this method (a compile-time check: a
// renamed method would silently turn the rates off).
var _ offload.HostBlockRater = (*host.Backend)(nil)

// ratedHost is kernels/host's backend with an injected GEMV figure and
// injected host block rates: the k-th block it is asked to rate gets
// rates[k] (the engine rates the units it packed one after another, in
// unit order), later ones the last rate.
type ratedHost struct {
	*host.Backend
	bw    float64
	rates []float64
	mu    *sync.Mutex
	calls *int
}

func (r ratedHost) HostBandwidth() float64 { return r.bw }

func (r ratedHost) RateHostBlock(data []byte) (float64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := min(*r.calls, len(r.rates)-1)
	*r.calls++
	return r.rates[k], nil
}

// TestHostBlockRates: with each layer's host block rated (injected rates:
// layer 2's block a million times faster than the others), the first
// three-way plan computes layer 2 alone on the host, each unit's host
// estimate is the GEMV figure's times the fastest rate over its own, the
// manager reports the rates by unit, and FT_TRACE's lines give the rates
// and the host unit's; the logits stay the resident run's. With
// FT_HOST_BLOCK_RATES=0 no block is rated, every unit's estimate is the
// same and the first plan computes more layers than one on the host
// (every estimate is 1 µs). All layers stream (a budget of one transfer
// block), so the choice is the planner's alone.
func TestHostBlockRates(t *testing.T) {
	fx := batchFixtures[0] // llama: 4 layers
	prompt := []int32{3, 17, 42, 5}
	const steps = 3
	hostDev, resident, want := residentRun(t, fx.dir, prompt, steps)
	unit, _, _ := unitBytes(t, resident)
	const fast, slow = 1e13, 1e7 // slow layers' estimates 1 s: off the host on any loaded machine
	for _, c := range []struct {
		name, env string
	}{{"rated", ""}, {"off", "0"}} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("FT_HOST_BLOCK_RATES", c.env)
			dev, cb := offloadDevice(t)
			defer dev.Close()
			rh := newRatedHost(t, unit, slow, slow, fast, slow, slow)
			cfg := hybridConfig(t, resident, dev, rh.Backend, 1)
			cfg.HostBackend, cfg.HostUnits = rh, nil
			lines := collectTrace(&cfg)
			name := "host-block-rates-" + c.name
			m := load(t, fx.dir, hostDev)
			mgr, release := offloadAs(t, m, &cfg, name)
			defer release()
			var firstHost []string
			var in offload.PlanInput
			got := generate(t, m, cb, prompt, steps, func(int) {
				if firstHost == nil && mgr.Phase() == offload.PhaseInference {
					firstHost = unitNames(mgr.HostUnits())
					var err error
					if in, err = mgr.PlanInput(); err != nil {
						t.Error(err)
					}
				}
			})
			matchResident(t, got, want)
			if firstHost == nil {
				t.Fatal("no INFERENCE pass")
			}
			rates := mgr.HostBlockRates()
			est := map[string]float64{}
			for _, u := range in.Units {
				est[u.Name] = u.HostSecPerToken
			}
			if c.env == "0" {
				if calls := *rh.calls; calls != 0 || len(rates) != 0 {
					t.Fatalf("rates off: %d blocks rated, rates %v", calls, rates)
				}
				if len(firstHost) < 2 {
					t.Fatalf("rates off: host units %v, want more than one (every estimate alike)", firstHost)
				}
				for n, s := range est {
					if math.Abs(s-1e-6) > 1e-12 {
						t.Errorf("rates off: %s estimated at %g s, want 1e-6", n, s)
					}
				}
				return
			}
			if calls := *rh.calls; calls < 4 {
				t.Fatalf("%d blocks rated, want the 4 layers'", calls)
			}
			for i, n := range []string{"model.layers.0", "model.layers.1", "model.layers.2", "model.layers.3"} {
				if rates[n] != rh.rates[i] {
					t.Errorf("%s rated %g bytes/s, want %g", n, rates[n], rh.rates[i])
				}
				if w := 1e-6 * fast / rh.rates[i]; math.Abs(est[n]-w) > 1e-9*w {
					t.Errorf("%s estimated at %g s a token, want %g (1 µs times %g/%g)", n, est[n], w, fast, rh.rates[i])
				}
			}
			if !slices.Equal(firstHost, []string{"model.layers.2"}) {
				t.Fatalf("host units %v, want the fast block's layer 2 alone", firstHost)
			}
			all := strings.Join(lines(), "\n")
			for _, w := range []string{"host block rates: 4 blocks rated, GB/s min 0.0 / median 0.0 / max 10000.0, 1 fast", "host units' blocks (unit:GB/s) 2:10000.0, fastest block off the host 0:0.0"} {
				if !strings.Contains(all, w) {
					t.Errorf("trace lacks %q:\n%s", w, all)
				}
			}
		})
	}
}

// TestHostBlockRealloc: FT_HOST_BLOCK_REALLOC=3 with layer 1 forced onto
// the host on a slow block (injected rates: the packed blocks fast, slow,
// fast, fast; the fresh blocks slow, then fast): the engine tries a fresh
// block (slow, held), then another (fast), copies layer 1's bytes into it
// and computes layer 1 from it: the logits stay the resident run's, the
// manager reports layer 1's new rate, six blocks were rated and the trace
// says one unit moved after two tries. Unset, nothing is reallocated; a
// malformed value is an error from Offload naming the variable.
func TestHostBlockRealloc(t *testing.T) {
	fx := batchFixtures[0] // llama: 4 layers
	prompt := []int32{3, 17, 42, 5}
	const steps = 3
	hostDev, resident, want := residentRun(t, fx.dir, prompt, steps)
	unit, _, _ := unitBytes(t, resident)
	const fast, slow = 1e13, 1e9
	for _, c := range []struct {
		name, env string
		calls     int
		rate1     float64
	}{{"on", "3", 6, fast}, {"unset", "", 4, slow}, {"bad", "many", 0, 0}} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("FT_HOST_BLOCK_REALLOC", c.env)
			dev, cb := offloadDevice(t)
			defer dev.Close()
			rh := newRatedHost(t, unit, fast, slow, fast, fast, slow, fast, slow)
			cfg := hybridConfig(t, resident, dev, rh.Backend, 1)
			cfg.HostBackend = rh // layer 1 forced onto the host
			lines := collectTrace(&cfg)
			name := "host-block-realloc-" + c.name
			m := load(t, fx.dir, hostDev)
			if c.name == "bad" {
				if err := offload.Offload(m, &cfg, name); err == nil || !strings.Contains(err.Error(), "FT_HOST_BLOCK_REALLOC") {
					t.Fatalf("FT_HOST_BLOCK_REALLOC=%s: error %v, want one naming the variable", c.env, err)
				}
				return
			}
			mgr, release := offloadAs(t, m, &cfg, name)
			defer release()
			var rate1 float64
			got := generate(t, m, cb, prompt, steps, func(int) {
				if rate1 == 0 && mgr.Phase() == offload.PhaseInference {
					if !slices.Contains(unitNames(mgr.HostUnits()), "model.layers.1") {
						t.Errorf("host units %v lack the forced layer 1", unitNames(mgr.HostUnits()))
					}
					rate1 = mgr.HostBlockRates()["model.layers.1"]
					rh.mu.Lock()
					if n := *rh.calls; n != c.calls {
						t.Errorf("%d blocks rated when INFERENCE began, want %d", n, c.calls)
					}
					rh.mu.Unlock()
				}
			})
			matchResident(t, got, want)
			if rate1 != c.rate1 {
				t.Fatalf("layer 1's block rate %g in INFERENCE, want %g", rate1, c.rate1)
			}
			all := strings.Join(lines(), "\n")
			w := "host block realloc: 1 of 1 slow host units moved to fast blocks (unit:GB/s 1:1.0->10000.0), 2 fresh blocks tried"
			if has := strings.Contains(all, w); has != (c.env != "") {
				t.Errorf("trace has %q: %v, want %v:\n%s", w, has, c.env != "", all)
			}
		})
	}
}
