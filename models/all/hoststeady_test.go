package all_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/offload"
)

// TestHostGenerateSteadyLikeBench: a hybrid model (layer 1 computed on the
// host, the others resident or streamed) generating the way run-model does
// (decoder.Generate: a 12-token prompt, then one-token steps fed by the
// chosen tokens) goes through the same passes as bench's decode loop (a
// prefill of a longer context, then one-token forwards of random tokens):
//   - one DISCOVERY pass (the prompt or the context, whatever its tokens),
//     ProfilingIters PROFILING passes at one token, then in INFERENCE the
//     host units' warm-up and measured passes (with the copies beside
//     them), and at most one placement change after them;
//   - every pass after those is steady (offload.PassInfo.Steady): nothing
//     measured again, no tokens bucket opened (the plan is keyed at one
//     token from the profiling passes, not at the prompt's 12), no switch;
//   - the steady plans are the same placement, for one token, in both;
//   - Generate's OnStep reports each step's forward and pick times.
//
// The issue-20 question behind it: run-model's median between tokens was
// above bench's steady forward on the H200; a plan kept for the prompt's
// token count, profiling or measuring that never stops, or replans in the
// steady state would show here as non-steady passes late in generation.
func TestHostGenerateSteadyLikeBench(t *testing.T) {
	fx := batchFixtures[0] // llama: 4 layers
	hostDev, _ := cpu(t)
	resident := load(t, fx.dir, hostDev)
	const newTokens = 20

	type run struct {
		passes []offload.PassInfo
		plan   offload.Plan
		tok    offload.TokenPlanStatus
		ht     offload.HostTimes
	}
	offloaded := func(t *testing.T, name string, drive func(m *decoder.Model, cb kernels.Backend, mgr *offload.Manager) []offload.PassInfo) run {
		dev, cb := offloadDevice(t)
		defer dev.Close()
		cfg := hybridConfig(t, resident, dev, hostBackend(t), 1)
		m := load(t, fx.dir, hostDev)
		mgr, release := offloadAs(t, m, &cfg, name)
		defer release()
		r := run{passes: drive(m, cb, mgr)}
		var err error
		if r.plan, err = mgr.Plan(); err != nil {
			t.Fatal(err)
		}
		r.tok, r.ht = mgr.TokenPlans(), mgr.HostTimes()
		return r
	}

	// run-model's way.
	var steps int
	gen := offloaded(t, "host-steady-generate", func(m *decoder.Model, cb kernels.Backend, mgr *offload.Manager) []offload.PassInfo {
		var ps []offload.PassInfo
		prompt := []int32{37, 235, 396, 72, 255, 393, 203, 133, 335, 448, 144, 129}
		for i := range prompt {
			prompt[i] %= int32(m.Cfg.VocabSize)
		}
		out, err := m.Generate(cb, prompt, decoder.GenerateOptions{
			MaxNewTokens: newTokens, IgnoreEOS: true,
			OnStep: func(forward, pick time.Duration) {
				steps++
				if forward <= 0 || pick < 0 {
					t.Errorf("step %d: forward %v, pick %v", steps, forward, pick)
				}
				ps = append(ps, mgr.LastPass())
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(out) != newTokens || steps != newTokens {
			t.Fatalf("%d tokens, %d OnStep calls, want %d each", len(out), steps, newTokens)
		}
		return ps
	})

	// bench's way (cmd/infer measureForwards): a prefill of the context,
	// then one-token forwards of random tokens, logits read back.
	bench := offloaded(t, "host-steady-bench", func(m *decoder.Model, cb kernels.Backend, mgr *offload.Manager) []offload.PassInfo {
		const context = 40
		cache, err := m.NewKVCache(cb, context+newTokens)
		if err != nil {
			t.Fatal(err)
		}
		defer cache.Free()
		rng := rand.New(rand.NewPCG(1, 2))
		logits := make([]float32, m.Cfg.VocabSize)
		var ps []offload.PassInfo
		for i := 0; i < newTokens; i++ {
			n := 1
			if i == 0 {
				n = context
			}
			ids := make([]int32, n)
			for j := range ids {
				ids[j] = int32(rng.IntN(m.Cfg.VocabSize))
			}
			lt, err := m.Forward(cb, cache, ids, false)
			if err != nil {
				t.Fatal(err)
			}
			if err := cb.ReadF32(logits, lt); err != nil {
				t.Fatal(err)
			}
			ps = append(ps, mgr.LastPass())
		}
		return ps
	})

	for _, c := range []struct {
		name string
		r    run
		t0   int // the first pass's tokens
	}{{"generate", gen, 12}, {"bench", bench, 40}} {
		var trail []string
		for _, p := range c.r.passes {
			trail = append(trail, p.String())
		}
		t.Logf("%s:\n  %s", c.name, strings.Join(trail, "\n  "))
		ps := c.r.passes
		for i, p := range ps {
			if p.Seq != i+1 {
				t.Fatalf("%s: pass %d has Seq %d", c.name, i+1, p.Seq)
			}
		}
		if ps[0].Phase != offload.PhaseDiscovery || ps[0].Tokens != c.t0 {
			t.Fatalf("%s: first pass %v, want DISCOVERY of %d tokens", c.name, ps[0], c.t0)
		}
		if ps[1].Phase != offload.PhaseProfiling || ps[2].Phase != offload.PhaseProfiling || ps[2].Tokens != 1 || !ps[2].PlanChanged {
			t.Fatalf("%s: passes 2, 3: %v; %v: want PROFILING of one token, INFERENCE's plan after it", c.name, ps[1], ps[2])
		}
		// The host units' measuring: a warm-up and ProfilingIters passes.
		measure := ps[3:6]
		want := []string{"host units warm-up", "host units", "host units"}
		for i, p := range measure {
			if p.Phase != offload.PhaseInference || len(p.Measuring()) == 0 || p.Measuring()[0] != want[i] || p.PlanTokens != 1 {
				t.Fatalf("%s: pass %d %v: want INFERENCE measuring %s under the plan for one token", c.name, p.Seq, p, want[i])
			}
		}
		if !ps[3].AfterChange {
			t.Errorf("%s: pass 4 (the first of INFERENCE) not marked first under a new placement: %v", c.name, ps[3])
		}
		first := 6 // the first steady pass: after the replan, and after the pass the replan moved units for
		if ps[5].PlanChanged {
			first = 7
			if !ps[6].AfterChange || ps[6].Steady() {
				t.Fatalf("%s: pass 7 after a replaced plan: %v, want it marked first under the new placement", c.name, ps[6])
			}
		}
		if len(ps) < first+5 {
			t.Fatalf("%s: %d passes, too few after the settling ones", c.name, len(ps))
		}
		for _, p := range ps[first:] {
			if !p.Steady() || p.PlanTokens != 1 || p.Tokens != 1 {
				t.Fatalf("%s: pass %d is not a steady one-token pass under the one-token plan: %v", c.name, p.Seq, p)
			}
		}
		if c.r.tok.PlanTokens != 1 || c.r.tok.Measured != 0 || c.r.tok.Switches != 0 || !slices.Equal(c.r.tok.Buckets, []int{1}) {
			t.Fatalf("%s: token plans %+v: want the plan for one token, no bucket measured, no switch", c.name, c.r.tok)
		}
		if c.r.ht.Replans != 1 {
			t.Fatalf("%s: %d replans from measured host times, want 1", c.name, c.r.ht.Replans)
		}
		last := ps[len(ps)-1]
		if last.Host == 0 || last.Resident+last.Streamed+last.Host != len(resident.Layers) {
			t.Fatalf("%s: steady plan %d/%d/%d (res/str/host), want the %d layers with the forced host one", c.name, last.Resident, last.Streamed, last.Host, len(resident.Layers))
		}
	}
	if !slices.Equal(gen.plan.Resident, bench.plan.Resident) || !slices.Equal(gen.plan.Host, bench.plan.Host) || gen.plan.Slots != bench.plan.Slots {
		t.Fatalf("steady placements differ: generate resident %v host %v slots %d, bench resident %v host %v slots %d",
			gen.plan.Resident, gen.plan.Host, gen.plan.Slots, bench.plan.Resident, bench.plan.Host, bench.plan.Slots)
	}
	if a, b := fmt.Sprint(gen.passes[len(gen.passes)-1].String()), fmt.Sprint(bench.passes[len(bench.passes)-1].String()); !strings.HasSuffix(a, "steady") || !strings.HasSuffix(b, "steady") {
		t.Fatalf("last passes: %q, %q: want both steady", a, b)
	}
}
