package all_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// moeBudgets are an MoE model's offload budgets under its own units
// (decoder.Model.OffloadUnits: attention, each expert): one ring slot and
// one pool slot (every expert streams through a single slot), attention
// resident with room for two experts' worth more (most experts stream),
// and half the units' bytes.
func moeBudgets(t *testing.T, m *decoder.Model) (fp offload.Footprint, budgets map[string]int64) {
	t.Helper()
	fp, err := offload.Measure(m, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var attn, attnAll, expert int64
	for i, n := range fp.UnitNames {
		if strings.HasSuffix(n, ".self_attn") {
			attn, attnAll = max(attn, fp.UnitBytes[i]), attnAll+fp.UnitBytes[i]
		} else {
			expert = max(expert, fp.UnitBytes[i])
		}
	}
	return fp, map[string]int64{
		"pool-of-one":      fp.FixedBytes + attn + expert,
		"experts-stream":   fp.FixedBytes + attnAll + 2*int64(m.Cfg.MoE.TopK)*expert,
		"half-the-weights": fp.FixedBytes + (fp.TotalBytes-fp.FixedBytes)/2,
	}
}

// TestMoEOffloadEqualsResident: on every device, tiny-mixtral and
// tiny-qwen3moe offloaded with their own units (attention, each expert a
// unit, the experts served by the expert cache) at budgets where every
// expert streams through one slot, where attention stays and most experts
// stream, and at half the weights, give the resident model's logits (within
// 1e-5 on the CPU, the device's tolerance on a GPU) at every step of a
// prefill and decode, the same greedy continuation as transformers, and,
// batched (sequences of mixed lengths joining and finishing at different
// steps), each sequence's resident logits and greedy tokens (on a GPU up to
// a near-tie of the resident run's top two, after which that sequence is
// not compared: a forward's last layer past attention takes only the rows
// whose logits it returns, so the batched and the resident run's last
// layers round their few rows' products differently). The expert
// cache copied experts and its hit rate is in the timing table.
func TestMoEOffloadEqualsResident(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		// Within 1e-5 on the CPU; the device's tolerance on a GPU (as
		// TestBatchEveryDevice's offloaded run), with the same top-1 — on a
		// GPU, unless the resident run's top two are a near-tie (within the
		// device's tolerance of each other): then same reports false, and a
		// greedy sequence's later forwards, whose inputs part there, are
		// not compared.
		same := func(what string, got, want []float32) bool {
			t.Helper()
			if d.Kind() == runtime.KindCPU {
				if dd := maxDiff(got, want); dd > 1e-5 {
					t.Fatalf("%s: differs from the resident run by %.3g", what, dd)
				}
			} else if !devtest.Close(t, got, want, d.Tol.Abs, d.Tol.Rel) {
				t.FailNow()
			}
			g, w := kernels.Argmax(got), kernels.Argmax(want)
			if g == w {
				return true
			}
			margin := float64(want[w]) - float64(want[g])
			if d.Kind() == runtime.KindCPU || margin > d.Tol.Allowed(float64(want[w])) {
				t.Fatalf("%s: top-1 %d, resident %d (the resident margin %.3g)", what, g, w, margin)
			}
			t.Logf("%s: top-1 %d, resident %d: a near-tie (the resident margin %.3g, the tolerance %.3g); the sequence's later forwards not compared",
				what, g, w, margin, d.Tol.Allowed(float64(want[w])))
			return false
		}
		compute := d.Backend
		if cb, ok := d.Backend.(*kernels.CPUBackend); ok {
			compute = strictBackend{cb, d.Dev}
		}
		for _, fx := range moeFixtures {
			t.Run(fx.family, func(t *testing.T) {
				ref := readReference(t, fx.dir)
				resident := load(t, fx.dir, d.Dev)
				prompt, steps := ref.LongPrompt[:20], 8
				want := testmodel.Run(t, resident, d.Backend, prompt, steps)
				ps := plans(resident.Cfg.VocabSize)
				wantB := runAlone(t, resident, d.Backend, ps)
				host := runtime.NewCPU(0)
				defer host.Close()
				_, budgets := moeBudgets(t, load(t, fx.dir, host))
				for _, bname := range []string{"pool-of-one", "experts-stream", "half-the-weights"} {
					budget := budgets[bname]
					t.Run(bname, func(t *testing.T) {
						m := load(t, fx.dir, host)
						name := fmt.Sprintf("%s-%s-%s", t.Name(), fx.family, d.Name)
						cfg := offload.DefaultConfig(d.Dev)
						cfg.GPUBudget = offload.Budget{Bytes: budget}
						cfg.OffloadTiming = offload.TimingEager
						if err := offload.Offload(m, &cfg, name); err != nil {
							t.Fatal(err)
						}
						defer func() {
							if err := offload.Release(name, true); err != nil {
								t.Error(err)
							}
						}()
						got := testmodel.Run(t, m, compute, prompt, steps)
						for i := range want {
							if !same(fmt.Sprintf("forward %d", i), got[i], want[i]) {
								break
							}
						}
						gen, err := m.Generate(compute, ref.GreedyPrompt, decoder.GenerateOptions{MaxNewTokens: len(ref.GreedyContinuation), IgnoreEOS: true})
						if err != nil {
							t.Fatal(err)
						}
						if !slices.Equal(gen, ref.GreedyContinuation) {
							t.Errorf("greedy continuation offloaded\n got  %v\n want %v", gen, ref.GreedyContinuation)
						}
						pc, err := m.NewPagedCache(compute, 64, 16)
						if err != nil {
							t.Fatal(err)
						}
						defer pc.Close()
						gotB := runBatched(t, m, compute, pc, ps)
						for i := range wantB {
							for s := range wantB[i] {
								if !same(fmt.Sprintf("sequence %d forward %d batched", i, s), gotB[i][s], wantB[i][s]) {
									break
								}
							}
						}
						mgr := offload.GetOffloadManager(name)
						plan, err := mgr.Plan()
						if err != nil {
							t.Fatal(err)
						}
						st := mgr.PoolStats()
						if plan.PoolSlots < 1 || st.Misses == 0 || st.Calls != st.ResidentCalls+st.Hits+st.Misses {
							t.Errorf("plan pool %d slots; pool stats %+v", plan.PoolSlots, st)
						}
						rep, err := offload.CollectOffloadTiming(name)
						if err != nil || rep == nil || len(rep.Announced) == 0 {
							t.Fatalf("timing: %v, %v", rep, err)
						}
						table := offload.FormatOffloadTimingTable(rep)
						if !strings.Contains(table, "hit rate") {
							t.Errorf("timing table without hit rates:\n%s", table)
						}
						t.Logf("%s, budget %d: %d pool slots, hit rate %.1f%%\n%s", fx.family, budget, plan.PoolSlots, 100*st.HitRate(), table)
					})
				}
			})
		}
	})
}
