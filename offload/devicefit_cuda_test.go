//go:build cuda

package offload_test

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/models/llama"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// TestGPUDeviceFitCard: on a GPU without a memory limit the offload
// pre-flight check compares with the card's free memory. A byte budget
// above the model and above the card's free memory still offloads and
// plans (the budget is a cap); a budget the model can use fully is
// refused by Manager.CheckDeviceFit once other allocations (a KV cache,
// here plain device buffers) took the card's free memory, the error naming
// the budget and the free memory, and accepted again once they are freed.
// A fraction of the card (0.9) with the card nearly full is refused at Offload,
// naming the fraction and the free memory (runtime.ErrOutOfMemory).
func TestGPUDeviceFitCard(t *testing.T) {
	// Layers of ~30 MB: a budget below the model is then far above the few
	// MiB the driver never hands out, so filling the card can go below it.
	dir := filepath.Join(t.TempDir(), "wide")
	mc := llama.Shapes["deep-test"]
	mc.HiddenSize, mc.IntermediateSize, mc.NumAttentionHeads, mc.NumKeyValueHeads, mc.HeadDim = 1024, 4096, 8, 2, 128
	if err := llama.MakeCheckpoint(dir, mc, 11, 1<<30); err != nil {
		t.Fatal(err)
	}
	f := newGPUFixture(t, dir)
	if limit := f.dev.Memory().Limit; limit > 0 {
		t.Fatalf("cuda:0 has a memory limit (%d bytes); the test is of a device without one", limit)
	}
	fp := gpuUnitBytes(t, f.model)
	prompt := []int32{3, 4, 5}

	free, _, err := f.dev.FreeMemory()
	if err != nil {
		t.Fatal(err)
	}
	cfg := offload.DefaultConfig(f.dev)
	cfg.TransferBlocks = 2
	cfg.GPUBudget = offload.Budget{Bytes: free + 1<<30}
	name := uniqueName(t)
	if err := offload.Offload(f.model, &cfg, name); err != nil {
		t.Fatalf("a budget of %s above the model (%s) and above the card's free memory (%s): %v",
			runtime.FormatBytes(cfg.GPUBudget.Bytes), runtime.FormatBytes(fp.TotalBytes), runtime.FormatBytes(free), err)
	}
	// Discovery, profiling, then the plan: the same logits each time.
	want := run(t, f.model, f.backend, prompt, 2)
	for i := 1; i < 4; i++ {
		got := run(t, f.model, f.backend, prompt, 2)
		for k := range want {
			if !slices.Equal(got[k], want[k]) {
				t.Fatalf("run %d under a budget above the model: step %d's logits differ from the first run's", i, k)
			}
		}
	}
	if p := offload.GetOffloadManager(name).Phase(); p != offload.PhaseInference {
		t.Fatalf("phase %v after four runs; want the plan made (INFERENCE)", p)
	}
	if err := offload.Release(name, true); err != nil {
		t.Fatal(err)
	}

	// A fraction of the card is checked as a byte budget is: with less
	// than half the model's bytes free (the non-unit weights, 1 MB, still
	// fit), 0.9 of the card (what of it the model can use) is refused at
	// Offload, naming the fraction and the free memory.
	taken := fillCard(t, f.dev, fp.TotalBytes/2)
	cfg.GPUBudget = offload.Budget{Fraction: 0.9}
	name = uniqueName(t)
	err = offload.Offload(f.model, &cfg, name)
	for _, b := range taken {
		b.Free()
	}
	if err == nil {
		offload.Release(name, true)
		t.Fatal("a budget of 0.9 of the card with less than the model free: Offload passed; want it refused")
	}
	if !errors.Is(err, runtime.ErrOutOfMemory) || !strings.Contains(err.Error(), "(0.9 of the device's") ||
		!strings.Contains(err.Error(), "exceeds the free memory of cuda:0") {
		t.Fatalf("a budget of 0.9 of the card with less than the model free: %v; want runtime.ErrOutOfMemory naming the fraction and the free memory", err)
	}
	t.Logf("0.9 of the card with less than the model free: %v", err)

	cfg.GPUBudget = offload.Budget{Bytes: fp.MinBudget(2) + 2*fp.MaxUnitBytes}
	if cfg.GPUBudget.Bytes >= fp.TotalBytes {
		t.Fatalf("budget %d is not below the model's %d bytes", cfg.GPUBudget.Bytes, fp.TotalBytes)
	}
	name = uniqueName(t)
	if err := offload.Offload(f.model, &cfg, name); err != nil {
		t.Fatal(err)
	}
	defer offload.Release(name, true)
	m := offload.GetOffloadManager(name)
	if err := m.CheckDeviceFit(); err != nil {
		t.Fatalf("before other allocations: %v", err)
	}
	taken = fillCard(t, f.dev, fp.MaxUnitBytes)
	err = m.CheckDeviceFit()
	for _, b := range taken {
		b.Free()
	}
	if err == nil || !strings.Contains(err.Error(), "budget "+runtime.FormatBytes(cfg.GPUBudget.Bytes)+" exceeds the free memory of cuda:0") ||
		!strings.Contains(err.Error(), "free of the card's") {
		t.Fatalf("CheckDeviceFit with the card full: %v; want the budget over the card's free memory", err)
	}
	t.Logf("with the card full: %v", err)
	if err := m.CheckDeviceFit(); err != nil {
		t.Fatalf("after the other allocations were freed: %v", err)
	}
}

// fillCard allocates device buffers until less than left bytes of the
// card are free, and returns them.
func fillCard(t *testing.T, dev *cuda.Device, left int64) []*runtime.DeviceBuffer {
	t.Helper()
	var bufs []*runtime.DeviceBuffer
	chunk := int64(8 << 30)
	for {
		free, _, err := dev.FreeMemory()
		if err != nil {
			t.Fatal(err)
		}
		if free < left {
			return bufs
		}
		n := min(chunk, free-left/2)
		b, err := dev.Alloc(n, "filling the card")
		if err != nil {
			if chunk < 1<<20 {
				for _, b := range bufs {
					b.Free()
				}
				t.Fatalf("cannot fill the card below %d free bytes: %v", left, err)
			}
			chunk /= 2
			continue
		}
		bufs = append(bufs, b)
	}
}
