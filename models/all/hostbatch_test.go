package all_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/host"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/models/kvcache"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// The decoder tells the engine which forwards can compute host units (a
// compile-time check: without it a forward that does not ask, under a
// three-way plan, would fail at its first host unit).
var _ offload.PlacementAsker = (*decoder.Model)(nil)

// hostBackendPasses is hostBackend with the products of 16+ tokens taking
// passes AMX passes (3: float32's precision, for comparisons at 1e-5; 0:
// the default) where the CPU has AMX.
func hostBackendPasses(t *testing.T, passes int) *host.Backend {
	t.Helper()
	dev := runtime.NewCPUNamed("host", 0)
	hb, err := host.New(dev, host.Options{Threads: 2, AMXPasses: passes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hb.Close()
		if err := dev.Close(); err != nil {
			t.Errorf("host device: %v", err)
		}
	})
	return hb
}

// batchHostModel is a fixture offloaded with a host backend fast enough
// that the planner computes layers on the host (every layer streams, a
// budget of one transfer block), after one sequence decoded under that
// three-way plan matched the resident run; it returns the model, its
// manager, the strict backend, the rated host (the engine's HostBackend)
// and the trace so far.
func batchHostModel(t *testing.T, dir, name string, passes int, resident *decoder.Model, prompt []int32, want [][]float32) (*decoder.Model, *offload.Manager, kernels.Backend, *ratedHost, func() []string) {
	t.Helper()
	unit, _, _ := unitBytes(t, resident)
	dev, cb := offloadDevice(t)
	t.Cleanup(func() { dev.Close() })
	rh := newRatedHost(t, unit, 1e13) // every layer 1 µs a token on the host
	rh.Backend = hostBackendPasses(t, passes)
	cfg := hybridConfig(t, resident, dev, rh.Backend, 1)
	cfg.HostBackend, cfg.HostUnits = &rh, nil // a pointer: the decoder compares backends
	lines := collectTrace(&cfg)
	m := load(t, dir, resident.Embed.Weight.Tensor().Device())
	mgr, release := offloadAs(t, m, &cfg, name)
	t.Cleanup(release)
	sb := strictBackend{cb, dev}
	matchResident(t, generate(t, m, sb, prompt, len(want)-1, nil), want)
	if len(mgr.HostUnits()) == 0 {
		t.Fatalf("the single-sequence plan computes no layer on the host: %v", lines())
	}
	return m, mgr, sb, &rh, lines
}

// checkMirrored fails unless the cache's mirror on hb holds a copy of
// every layer the plan in force computes on the host.
func checkMirrored(t *testing.T, m *decoder.Model, mgr *offload.Manager, cache *kvcache.Paged, hb kernels.Backend) {
	t.Helper()
	mi, err := cache.Mirror(hb)
	if err != nil {
		t.Fatal(err)
	}
	host := mgr.HostUnits()
	if len(host) == 0 {
		t.Fatalf("no layer on the host after the batched run (token plans %+v)", mgr.TokenPlans())
	}
	for _, u := range host {
		for _, l := range m.Layers {
			if l.Node().Name() == u.Name && !mi.Mirrored(l.Index) {
				t.Errorf("host layer %s has no copy of its keys and values on the host", u.Name)
			}
		}
	}
}

// TestBatchHost: a model offloaded with a host backend decodes one
// sequence under a three-way plan with layers on the host; batched forwards
// (sequences of mixed lengths joining and finishing at different steps)
// then run under three-way plans too (the first, of far more tokens than
// the decode plan's, under a provisional plan with no host unit until its
// bucket is measured), their host layers on a mirror of the paged cache,
// and give each sequence's logits run alone within 1e-5 (the
// host's products at float32's precision); with the AMX products' default
// passes, the same greedy tokens and logits within 1e-4. Every KV block is
// returned, and single-sequence decoding afterwards still gives the
// resident run's logits. For every dense family.
func TestBatchHost(t *testing.T) {
	for _, fx := range batchFixtures {
		for _, passes := range []int{3, 0} {
			t.Run(fmt.Sprintf("%s/passes%d", fx.family, passes), func(t *testing.T) {
				prompt := []int32{3, 17, 42, 5}
				const steps = 8
				hostDev, rb := cpu(t)
				resident := load(t, fx.dir, hostDev)
				want := testmodel.Run(t, resident, rb, prompt, steps)
				ps := plans(resident.Cfg.VocabSize)
				wantBatch := runAlone(t, resident, rb, ps)
				m, mgr, sb, rh, lines := batchHostModel(t, fx.dir, strings.ReplaceAll(t.Name(), "/", "-"), passes, resident, prompt, want)

				cache, err := m.NewPagedCache(sb, 64, 4)
				if err != nil {
					t.Fatal(err)
				}
				defer cache.Close()
				got := runBatched(t, m, sb, cache, ps)
				if passes == 3 {
					checkBatched(t, got, wantBatch)
				} else {
					checkBatchedWithin(t, got, wantBatch, 1e-4)
				}
				if cache.FreeBlocks() != cache.TotalBlocks() || cache.LiveSeqs() != 0 {
					t.Errorf("after the batched run: %d of %d blocks free, %d sequences live", cache.FreeBlocks(), cache.TotalBlocks(), cache.LiveSeqs())
				}
				if st := mgr.TokenPlans(); st.HostFree {
					t.Errorf("after the batched run: token plans %+v; want a three-way plan in force", st)
				}
				checkMirrored(t, m, mgr, cache, rh)
				all := strings.Join(lines(), "\n")
				if strings.Contains(all, "forwards that cannot compute host units") {
					t.Errorf("a batched forward ran under a host-free bucket's plan:\n%s", all)
				}
				// The first batched pass (39 tokens) is far more than the
				// decode plan's host units were planned for: it runs without
				// them until its bucket is measured.
				if !strings.Contains(all, "too many tokens for the host units of the plan it replaces") {
					t.Errorf("no provisional plan without host units for the first 39-token pass:\n%s", all)
				}
				matchResident(t, generate(t, m, sb, prompt, steps, nil), want)
			})
		}
	}
}

// checkBatchedWithin is checkBatched at tolerance tol, the greedy tokens
// compared too.
func checkBatchedWithin(t *testing.T, got, want [][][]float32, tol float64) {
	t.Helper()
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("sequence %d: %d forwards, want %d", i, len(got[i]), len(want[i]))
		}
		for s := range want[i] {
			if d := maxDiff(got[i][s], want[i][s]); d > tol {
				t.Errorf("sequence %d forward %d: batched logits differ from the sequence alone by %.3g", i, s, d)
			}
			if a, b := kernels.Argmax(got[i][s]), kernels.Argmax(want[i][s]); a != b {
				t.Errorf("sequence %d forward %d: greedy token %d, alone %d", i, s, a, b)
			}
		}
	}
}

// TestBatchHostMirrorKept: the host's copy of the keys and values stays
// right while the sequences go on across plan switches and swaps. Batched
// forwards run with host layers, then a few with every layer on the device
// (BatchHostFree: the engine puts a host-free plan in force, and the
// device writes blocks the mirror must copy again), then with host layers
// again; a sequence is swapped out and back into other blocks (which held
// other positions in the mirror). Each sequence's logits match it run
// alone within 1e-5 throughout.
func TestBatchHostMirrorKept(t *testing.T) {
	fx := batchFixtures[0]
	prompt := []int32{3, 17, 42, 5}
	hostDev, rb := cpu(t)
	resident := load(t, fx.dir, hostDev)
	want := testmodel.Run(t, resident, rb, prompt, 3)
	V := resident.Cfg.VocabSize
	ps := []seqPlan{
		{planPrompt(6, 1, V), 24, 0},
		{planPrompt(3, 2, V), 20, 0},
		{planPrompt(9, 3, V), 12, 9},
	}
	wantBatch := runAlone(t, resident, rb, ps)
	m, mgr, sb, rh, lines := batchHostModel(t, fx.dir, "batch-host-mirror-kept", 3, resident, prompt, want)
	cache, err := m.NewPagedCache(sb, 64, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	sw, err := cache.NewSwap(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	hostAt := map[int]int{}
	got := runBatched(t, m, sb, cache, ps, func(step int, seqs []*kvcache.Seq) {
		if step > 0 {
			hostAt[step-1] = len(mgr.HostUnits())
		}
		m.BatchHostFree = step >= 4 && step < 8
		if step == 13 {
			s := seqs[0]
			if err := sw.Out(s); err != nil {
				t.Fatal(err)
			}
			hold := cache.NewSeq() // takes the blocks s gave back
			if err := hold.Reserve(s.Len() + 8); err != nil {
				t.Fatal(err)
			}
			if err := sw.In(s); err != nil {
				t.Fatal(err)
			}
			hold.Free()
		}
	})
	checkBatched(t, got, wantBatch)
	if hostAt[3] == 0 || hostAt[5] != 0 || hostAt[12] == 0 || hostAt[15] == 0 {
		t.Errorf("host layers by step %v: want some at steps 3, 12 and 15, none at step 5", hostAt)
	}
	t.Logf("host layers by step %v", hostAt)
	if !strings.Contains(strings.Join(lines(), "\n"), "with no host unit") {
		t.Errorf("no trace of the host-free plan the steps with BatchHostFree ran under")
	}
	checkMirrored(t, m, mgr, cache, rh)
	if cache.FreeBlocks() != cache.TotalBlocks() {
		t.Errorf("%d of %d blocks free at the end", cache.FreeBlocks(), cache.TotalBlocks())
	}
}

// TestBatchHostFree: with BatchHostFree set, batched forwards of a model
// whose single-sequence plan computes layers on the host run under plans
// with no layer on the host (a host-free bucket's) and give each
// sequence's logits run alone within 1e-5, with every KV block returned;
// single-sequence decoding afterwards switches back to the plan with host
// layers and still gives the resident run's logits. For every dense family.
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
			m, mgr, sb, _, lines := batchHostModel(t, fx.dir, "batch-host-free-"+fx.family, 0, resident, prompt, want)
			m.BatchHostFree = true

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
// batched forwards compute it there and give each sequence's logits run
// alone within 1e-5. With BatchHostFree a batched forward is an error
// naming the layer and the setting; the sequence it carried is unharmed
// (its blocks free again), and single-sequence decoding still gives the
// resident run's logits.
func TestBatchForcedHost(t *testing.T) {
	fx := batchFixtures[0]
	prompt := []int32{3, 17, 42, 5}
	const steps = 3
	hostDev, resident, want := residentRun(t, fx.dir, prompt, steps)
	rb, err := kernels.NewCPUBackend(hostDev)
	if err != nil {
		t.Fatal(err)
	}
	ps := plans(resident.Cfg.VocabSize)
	wantBatch := runAlone(t, resident, rb, ps)
	dev, cb := offloadDevice(t)
	defer dev.Close()
	cfg := hybridConfig(t, resident, dev, hostBackendPasses(t, 3), 1) // model.layers.1 on the host
	m := load(t, fx.dir, hostDev)
	mgr, release := offloadAs(t, m, &cfg, "batch-forced-host")
	defer release()
	sb := strictBackend{cb, dev}
	matchResident(t, generate(t, m, sb, prompt, steps, nil), want)

	cache, err := m.NewPagedCache(sb, 64, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	checkBatched(t, runBatched(t, m, sb, cache, ps), wantBatch)
	if h := unitNames(mgr.HostUnits()); len(h) != 1 || h[0] != "model.layers.1" {
		t.Errorf("host units %v after the batched run; want model.layers.1", h)
	}

	m.BatchHostFree = true
	seq := cache.NewSeq()
	_, err = m.ForwardBatch(sb, cache, []decoder.BatchEntry{{Seq: seq, IDs: prompt}})
	if err == nil || !strings.Contains(err.Error(), "model.layers.1") || !strings.Contains(err.Error(), "Config.HostUnits") {
		t.Fatalf("batched forward with a forced host layer and BatchHostFree: %v; want an error naming model.layers.1 and Config.HostUnits", err)
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
