package all_test

import (
	"fmt"
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/offload"
)

// TestHostDecodeAllocs: Llama with every layer computed on the host (the
// host backend on a CPU device of its own; the "device" a CPU device with
// the reference kernels), after discovery and profiling:
//   - a fresh KV cache's first forward makes every host layer's KV storage
//     outside the Go heap: the heap grows by far less than that storage
//     (before, each layer's was Go memory made at its first host forward,
//     a GC cycle at each doubling of a small heap while the host units
//     were being measured);
//   - a one-token decode step then allocates at most 2 objects per host
//     layer (the pool's job hand-off) plus a fixed few per forward (the
//     device side's views, the CPU device's copies): ~47 per layer before;
//   - the logits equal the resident model's (the storage change is
//     invisible);
//   - packing traced its pinned blocks' huge-page coverage, over exactly
//     the units' bytes, with the mappings reaching beyond them apart.
func TestHostDecodeAllocs(t *testing.T) {
	fx := batchFixtures[0] // llama: the host layers run as one op
	prompt := []int32{3, 17, 42, 5, 9, 11, 2}
	const steps = 6
	hostDev, resident, want := residentRun(t, fx.dir, prompt, steps)

	dev, cb := offloadDevice(t)
	defer dev.Close()
	_, _, total := unitBytes(t, resident)
	cfg := offload.DefaultConfig(dev)
	cfg.HostBackend = slowHost{hostBackend(t)}
	cfg.HostUnits = []string{"model.layers.*"}
	cfg.PinnedMemory = true
	traced := collectTrace(&cfg)
	const name = "host-decode-allocs"
	m := load(t, fx.dir, hostDev)
	_, release := offloadAs(t, m, &cfg, name)
	defer release()
	testmodel.Run(t, m, cb, prompt, steps) // discovery, profiling
	got := testmodel.Run(t, m, cb, prompt, steps)
	if n := len(offload.HostUnits(name)); n != len(m.Layers) {
		t.Fatalf("%d host units, want all %d layers", n, len(m.Layers))
	}
	for i := range want {
		if d := maxDiff(got[i], want[i]); d > 1e-5 {
			t.Fatalf("step %d: logits differ from the resident model's by %g", i, d)
		}
	}
	var pinned string
	for _, s := range traced() {
		if strings.HasPrefix(s, "pinned: ") {
			pinned = s
		}
	}
	if pinned == "" || !strings.Contains(pinned, " MiB on huge pages") {
		t.Fatalf("no pinned huge-page coverage traced: %q", traced())
	}
	t.Logf("%s (units: %d bytes)", pinned, total)
	if f := strings.Fields(pinned); len(f) < 4 || f[3] != fmt.Sprintf("%.1f", float64(total)/(1<<20)) {
		t.Fatalf("traced %q: want the units' %.1f MiB as the total", pinned, float64(total)/(1<<20))
	}
	if !strings.Contains(pinned, "; mappings reaching beyond them: AnonHugePages ") {
		t.Fatalf("traced %q: want the mappings reaching beyond the blocks reported apart, unclamped", pinned)
	}

	// A long cache: its host KV storage is large beside the heap's growth.
	const ctx = 4096
	cache, err := m.NewKVCache(cb, ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Free()
	kvBytes := int64(0)
	for l := range m.Layers {
		k, v := cache.View(l)
		kvBytes += k.NumBytes() + v.NumBytes() // F32 on the CPU device, as on the host
	}
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	if _, err := m.Forward(cb, cache, prompt, false); err != nil {
		t.Fatal(err)
	}
	goruntime.ReadMemStats(&after)
	grew := int64(after.TotalAlloc - before.TotalAlloc)
	t.Logf("first forward of a %d-position cache: %d bytes allocated on the Go heap; host KV storage %d bytes", ctx, grew, kvBytes)
	if grew > kvBytes/4 {
		t.Fatalf("the first forward allocated %d bytes on the Go heap, the host KV storage is %d: it is on the heap", grew, kvBytes)
	}
	ids := []int32{7}
	step := func() {
		if _, err := m.Forward(cb, cache, ids, false); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		step()
	}
	allocs := testing.AllocsPerRun(20, step)
	perForward := 30.0
	limit := perForward + 2*float64(len(m.Layers))
	t.Logf("%.1f allocations a decode step with %d host layers (limit %g)", allocs, len(m.Layers), limit)
	if allocs > limit {
		t.Fatalf("a decode step made %.1f allocations, want at most %g", allocs, limit)
	}
}
