package offload_test

import (
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/flextensor-go/flextensor/offload"
)

// soakForwards is the number of forwards TestSoak runs: FT_SOAK when set
// (the full run is FT_SOAK=1000), else 100.
func soakForwards(t *testing.T) int {
	s := os.Getenv("FT_SOAK")
	if s == "" {
		return 100
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("FT_SOAK=%q: want a positive number of forwards", s)
	}
	return n
}

// TestSoak runs many offloaded forwards of the tiny model (one resident
// unit, three streamed through two transfer blocks, eager timing): every
// output equals the first and the resident reference, and the compute
// device's bytes in use, allocation count and peak and the pinned bytes stay
// exactly where the first INFERENCE forward left them. The timing window is
// collected and reset every 50 passes and holds exactly those passes.
func TestSoak(t *testing.T) {
	n := soakForwards(t)
	r := newRig(t, "")
	r.cfg.OffloadTiming = offload.TimingEager
	r.offload()
	r.until(offload.PhaseInference)
	first, err := r.forward()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(first, r.want) {
		t.Fatal("the first INFERENCE forward differs from the resident reference")
	}
	dev0, pinned0 := r.f.dev.Memory(), r.f.dev.HostMemory()
	offload.ResetOffloadTiming(r.name)
	const window = 50
	for i := 1; i <= n; i++ {
		got, err := r.forward()
		if err != nil {
			t.Fatalf("forward %d: %v", i, err)
		}
		if !slices.Equal(got, first) {
			t.Fatalf("forward %d differs from the first", i)
		}
		if m := r.f.dev.Memory(); m != dev0 {
			t.Fatalf("forward %d: device memory %+v, after the first INFERENCE forward %+v", i, m, dev0)
		}
		if h := r.f.dev.HostMemory(); h != pinned0 {
			t.Fatalf("forward %d: pinned memory %+v, after the first INFERENCE forward %+v", i, h, pinned0)
		}
		if i%window == 0 {
			rep, err := offload.CollectOffloadTiming(r.name)
			if err != nil || rep == nil || len(rep.Snapshots) != window {
				t.Fatalf("forward %d: timing window %v (%v), want %d passes", i, rep, err, window)
			}
			offload.ResetOffloadTiming(r.name)
		}
	}
	t.Logf("%d forwards: device %d bytes in %d allocations (peak %d), pinned %d bytes in %d allocations",
		n, dev0.InUse, dev0.Count, dev0.Peak, pinned0.InUse, pinned0.Count)
	r.release()
}
