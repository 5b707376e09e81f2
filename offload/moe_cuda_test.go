//go:build cuda

package offload_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestGPUAnnouncedUnits offloads a wider Switch (4 layers of 16 experts of
// 2×512×1536 + 1536×512 BF16, top 2; 3 MiB an expert) on GPU 0, whose
// experts run zero, one or several times a pass in an order the router
// picks: at "one ring slot and one pool slot", at attention resident with
// four pool slots' worth, and at a quarter of the weights, with both
// eviction policies, 40 passes of 1 to 5 tokens each equal the all-resident
// run bit for bit, the expert cache's counts match the timing report, and
// the report (logged) shows hit rates, bytes per pass and per token, next
// to the plan's prediction. TestAnnouncedUnitsEqualResident/cuda:0 runs
// the small Switch the CPU tests use.
func TestGPUAnnouncedUnits(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		if d.Kind() != runtime.KindCUDA {
			t.Skip("the GPU test; TestAnnouncedUnitsEqualResident covers the CPU")
		}
		const layers, experts, topK, dim, hidden = 4, 16, 2, 512, 1536
		build := func() *Switch { return hostSwitchOf(t, layers, experts, topK, dim, hidden) }
		fp, err := offload.Measure(build(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var attn, expert int64
		for i, n := range fp.UnitNames {
			if strings.HasSuffix(n, ".attn") {
				attn = max(attn, fp.UnitBytes[i])
			} else {
				expert = max(expert, fp.UnitBytes[i])
			}
		}
		inputs := switchInputs(40, 7)
		ref, _ := offloadThis(t, build(), d, fp.TotalBytes, nil)
		want, _ := switchPasses(t, ref, d.Backend, inputs)
		for _, policy := range []offload.EvictionPolicy{offload.EvictFrequency, offload.EvictLRU} {
			for _, c := range []struct {
				name   string
				budget int64
			}{
				{"pool-of-one", fp.FixedBytes + attn + expert},
				{"attention-resident", fp.FixedBytes + layers*attn + 4*expert},
				{"quarter", fp.FixedBytes + (fp.TotalBytes-fp.FixedBytes)/4},
			} {
				t.Run(fmt.Sprintf("%s-%v", c.name, policy), func(t *testing.T) {
					s, name := offloadThis(t, build(), d, c.budget, func(cfg *offload.Config) { cfg.PoolEviction = policy })
					got, _ := switchPasses(t, s, d.Backend, inputs)
					sameOutputs(t, got, want, c.name)
					m := offload.GetOffloadManager(name)
					plan, err := m.Plan()
					if err != nil {
						t.Fatal(err)
					}
					st := m.PoolStats()
					rep, err := offload.CollectOffloadTiming(name)
					if err != nil || rep == nil {
						t.Fatalf("timing: %v %v", rep, err)
					}
					var calls, hits int64
					for _, g := range rep.Announced {
						calls += g.Calls
						hits += g.Hits
					}
					if calls != st.Calls || hits != st.ResidentCalls+st.Hits || st.Misses == 0 {
						t.Errorf("report %d calls, %d hits; pool stats %+v", calls, hits, st)
					}
					usage, err := offload.GetGPUMemoryUsage(name)
					if err != nil || usage.TotalBytes > c.budget {
						t.Errorf("engine holds %d bytes of a budget of %d (%v)", usage.TotalBytes, c.budget, err)
					}
					t.Logf("budget %s, %d pool slots, hit rate %.1f%%:\n%s", runtime.FormatBytes(c.budget), plan.PoolSlots,
						100*st.HitRate(), offload.FormatOffloadTimingTable(rep))
				})
			}
		}
	})
}
