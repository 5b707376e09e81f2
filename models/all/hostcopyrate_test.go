package all_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/offload"
)

// TestHostCopyRateReplan: a hybrid generation whose streamed units' copies
// are slowed (3 ms each) once INFERENCE runs, as the copy engine is beside
// host units, but not while PROFILING measured the copy curve. The passes
// that time the host units also time those copies, so the measured replan
// scales the plan's copy times (clamped at 4x the profiled curve, which a
// CPU memcpy makes microseconds), reports the copy rate in its trace line
// and in HostTimes, and the logits stay the resident run's.
func TestHostCopyRateReplan(t *testing.T) {
	fx := batchFixtures[0] // llama: 4 layers
	prompt := []int32{3, 17, 42, 5, 9, 11, 2}
	const steps = 12
	hostDev, resident, want := residentRun(t, fx.dir, prompt, steps)

	dev, cb := offloadDevice(t)
	defer dev.Close()
	unit, _, _ := unitBytes(t, resident)
	var slow atomic.Bool
	var slowed atomic.Int64
	dev.CopyFault = func(op string, n int64) error {
		if op == "H2D copy" && n >= unit/2 && slow.Load() {
			slowed.Add(1)
			time.Sleep(3 * time.Millisecond)
		}
		return nil
	}
	cfg := hybridConfig(t, resident, dev, hostBackend(t), 1)
	traced := collectTrace(&cfg)
	const name = "host-copy-rate"
	m := load(t, fx.dir, hostDev)
	mgr, release := offloadAs(t, m, &cfg, name)
	defer release()
	got := generate(t, m, cb, prompt, steps, func(int) {
		if mgr.Phase() == offload.PhaseInference {
			slow.Store(true)
		}
	})
	matchResident(t, got, want)
	if len(offload.OffloadUnits(name)) == 0 || slowed.Load() == 0 {
		t.Fatalf("streamed units %v, %d slowed copies: the test needs streamed copies in INFERENCE", unitNames(offload.OffloadUnits(name)), slowed.Load())
	}
	ht := mgr.HostTimes()
	if ht.Replans != 1 {
		t.Fatalf("%d measured-host replans, want 1", ht.Replans)
	}
	if ht.CopySamples == 0 || ht.CopyScale != 4 || ht.CopyBytesPerSec <= 0 || ht.CopyBytesPerSec >= ht.ProfiledCopyBytesPerSec {
		t.Fatalf("copies measured: scale %v from %d samples, %v B/s against %v profiled; want the 4x clamp from copies slower than the profile",
			ht.CopyScale, ht.CopySamples, ht.CopyBytesPerSec, ht.ProfiledCopyBytesPerSec)
	}
	var line string
	for _, s := range traced() {
		if strings.Contains(s, "after measuring host units") {
			line = s
		}
	}
	if !strings.Contains(line, "copies measured at") || !strings.Contains(line, "copy times x4.000") {
		t.Fatalf("replan trace %q: want the measured copy rate", line)
	}
	t.Log(line)
}
