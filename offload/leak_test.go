package offload_test

import (
	"path/filepath"
	goruntime "runtime"
	"slices"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models/llama"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// leakCycles is the number of offload/release cycles of TestLeakCycles.
const leakCycles = 100

// microDir writes a four-layer Llama checkpoint far smaller than the tiny
// fixture (hidden size 32, vocabulary 64): the leak cycles exercise the
// engine's bookkeeping, so their forwards should cost next to nothing.
func microDir(t *testing.T) string {
	t.Helper()
	cfg := llama.Shapes["deep-test"]
	cfg.HiddenSize, cfg.IntermediateSize, cfg.NumHiddenLayers = 32, 64, 4
	cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.HeadDim, cfg.VocabSize = 2, 1, 16, 64
	dir := filepath.Join(t.TempDir(), "micro")
	if err := llama.MakeCheckpoint(dir, cfg, 11, 1<<20); err != nil {
		t.Fatal(err)
	}
	return dir
}

// waitGoroutines waits (up to two seconds) for the goroutine count to fall
// to at most n, and reports the count: a stream's goroutine may still be
// unwinding just after its Close returns.
func waitGoroutines(n int) int {
	deadline := time.Now().Add(2 * time.Second)
	for {
		g := goruntime.NumGoroutine()
		if g <= n || time.Now().After(deadline) {
			return g
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLeakCycles runs 100 offload/release cycles of a four-layer Llama
// (microDir), varying
// the slot count (1–3), the budget (smallest, one unit more, unlimited), the
// way in (Offload released at once, after a discovery pass, or after running
// into INFERENCE; OffloadFromState from a saved profile), timing on or off,
// and preserveModel; a model released without preserveModel is discarded
// and loaded again. After every Release the compute device's bytes and
// allocations, its pinned (host) bytes and allocations and the goroutine
// count are back at their baseline (the model's KV cache, and its workspace
// once it has run); in INFERENCE the engine holds exactly what
// GetGPUMemoryUsage reports; discovery and inference passes compute the
// reference.
func TestLeakCycles(t *testing.T) {
	dir := microDir(t)
	host, dev := runtime.NewCPU(0), runtime.NewCPU(0)
	plain, err := kernels.NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	strict := strictBackend{plain, dev}
	prompt := []int32{42, 7, 19}
	var (
		model *llama.Model
		ck    *loader.Checkpoint
		cache *llama.KVCache
		ran   bool // the model has run since it was loaded: its workspace is on the device
	)
	forward := func(b kernels.Backend) []float32 {
		t.Helper()
		ran = true
		cache.Reset()
		lt, err := model.Forward(b, cache, prompt, false)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float32, lt.NumElements())
		if err := b.ReadF32(out, lt); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// load builds the model on the host device and its KV cache on the
	// compute device. The model's first forward leaves its workspace on the
	// compute device; the baseline counts it once the model has run.
	load := func() {
		t.Helper()
		var err error
		if model, ck, err = llama.Load(dir, host); err != nil {
			t.Fatal(err)
		}
		if cache, err = model.NewKVCache(plain, len(prompt)); err != nil {
			t.Fatal(err)
		}
		ran = false
	}
	discard := func() {
		t.Helper()
		cache.Free()
		model.Close()
		if err := ck.Close(); err != nil {
			t.Fatal(err)
		}
		if m := dev.Memory(); m.InUse != 0 || m.Count != 0 {
			t.Fatalf("device holds %d bytes in %d allocations with no model", m.InUse, m.Count)
		}
		if m := host.Memory(); m.InUse != 0 || m.Count != 0 {
			t.Fatalf("host device holds %d bytes in %d allocations with no model", m.InUse, m.Count)
		}
	}
	load()
	loaded := dev.Memory()
	want := forward(plain) // the reference, from the host weights
	ranBase := dev.Memory()
	baseline := func() runtime.MemStats {
		if ran {
			return ranBase
		}
		return loaded
	}
	fp, err := offload.Measure(model, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	pinnedBase := dev.HostMemory()
	goBase := goruntime.NumGoroutine()

	// A saved profile for the OffloadFromState cycles.
	st := func() *offload.State {
		name := uniqueName(t)
		cfg := offload.DefaultConfig(dev)
		cfg.TransferBlocks, cfg.ProfilingIters = 2, 1
		cfg.GPUBudget = offload.Budget{Bytes: fp.MinBudget(2) + fp.MaxUnitBytes}
		if err := offload.Offload(model, &cfg, name); err != nil {
			t.Fatal(err)
		}
		for offload.GetOffloadManager(name).Phase() != offload.PhaseInference {
			forward(strict)
		}
		st, err := offload.GetOffloadManager(name).State()
		if err != nil {
			t.Fatal(err)
		}
		if err := offload.Release(name, true); err != nil {
			t.Fatal(err)
		}
		return st
	}()

	for i := 0; i < leakCycles; i++ {
		name := uniqueName(t)
		slots := 1 + i%3
		budgets := []int64{fp.MinBudget(slots), fp.MinBudget(slots) + fp.MaxUnitBytes, 0}
		cfg := offload.DefaultConfig(dev)
		cfg.TransferBlocks, cfg.ProfilingIters = slots, 1
		cfg.GPUBudget = offload.Budget{Bytes: budgets[(i/3)%3]}
		if i%5 == 0 {
			cfg.OffloadTiming = offload.TimingEager
		}
		preserve := i%2 == 0
		way := i % 4
		if way == 3 {
			if err := offload.OffloadFromState(model, st, &cfg, name, false); err != nil {
				t.Fatalf("cycle %d: %v", i, err)
			}
		} else if err := offload.Offload(model, &cfg, name); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		mgr := offload.GetOffloadManager(name)
		switch way {
		case 1:
			if got := forward(strict); !slices.Equal(got, want) {
				t.Fatalf("cycle %d: discovery pass differs from the reference", i)
			}
		case 2, 3:
			for k := 0; k < 4 && mgr.Phase() != offload.PhaseInference; k++ {
				forward(strict)
			}
			if got := forward(strict); !slices.Equal(got, want) || mgr.Phase() != offload.PhaseInference {
				t.Fatalf("cycle %d: inference pass in %v differs from the reference", i, mgr.Phase())
			}
			usage, err := mgr.GPUMemoryUsage()
			if err != nil {
				t.Fatal(err)
			}
			if held := dev.Memory().InUse - baseline().InUse; held != usage.TotalBytes {
				t.Fatalf("cycle %d: engine holds %d device bytes, GetGPUMemoryUsage says %d", i, held, usage.TotalBytes)
			}
		}
		if err := offload.Release(name, preserve); err != nil {
			t.Fatalf("cycle %d: Release(%v): %v", i, preserve, err)
		}
		if m, base := dev.Memory(), baseline(); m.InUse != base.InUse || m.Count != base.Count {
			t.Fatalf("cycle %d (way %d, %d slots, budget %v, preserve %v): device memory %d bytes in %d allocations, baseline %d in %d",
				i, way, slots, cfg.GPUBudget, preserve, m.InUse, m.Count, base.InUse, base.Count)
		}
		if h := dev.HostMemory(); h.InUse != pinnedBase.InUse || h.Count != pinnedBase.Count {
			t.Fatalf("cycle %d: pinned memory %d bytes in %d allocations, baseline %d in %d", i, h.InUse, h.Count, pinnedBase.InUse, pinnedBase.Count)
		}
		if g := waitGoroutines(goBase); g > goBase {
			t.Fatalf("cycle %d: %d goroutines, %d before the first Offload", i, g, goBase)
		}
		if !preserve {
			discard()
			load()
			if m := dev.Memory(); m.InUse != loaded.InUse || m.Count != loaded.Count {
				t.Fatalf("cycle %d: reloaded model's baseline %d bytes in %d allocations, first %d in %d", i, m.InUse, m.Count, loaded.InUse, loaded.Count)
			}
		}
	}
	discard()
	if err := dev.Close(); err != nil {
		t.Error(err)
	}
	if err := host.Close(); err != nil {
		t.Error(err)
	}
}
