package all_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
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
	hostDev, cb0 := cpu(t)
	resident := load(t, fx.dir, hostDev)
	prompt := []int32{3, 17, 42, 5, 9, 11, 2}
	const steps = 12
	want := testmodel.Run(t, resident, cb0, prompt, steps)

	dev := runtime.NewCPU(0)
	defer dev.Close()
	cb, err := kernels.NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
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
	var traced []string
	cfg.Trace = func(step string, _ time.Duration) { traced = append(traced, step) }
	const name = "host-copy-rate"
	m := load(t, fx.dir, hostDev)
	if err := offload.Offload(m, &cfg, name); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := offload.Release(name, true); err != nil {
			t.Error(err)
		}
	}()
	mgr := offload.GetOffloadManager(name)
	cache, err := m.NewKVCache(cb, len(prompt)+steps)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Free()
	got, err := testmodel.Steps(m, cb, cache, prompt, steps, func(step int, logits []float32) int32 {
		if mgr.Phase() == offload.PhaseInference {
			slow.Store(true)
		}
		return testmodel.Argmax(step, logits)
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if d := maxDiff(got[i], want[i]); d > 1e-5 {
			t.Fatalf("step %d: logits differ by %g", i, d)
		}
	}
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
	for _, s := range traced {
		if strings.Contains(s, "after measuring host units") {
			line = s
		}
	}
	if !strings.Contains(line, "copies measured at") || !strings.Contains(line, "copy times x4.000") {
		t.Fatalf("replan trace %q: want the measured copy rate", line)
	}
	t.Log(line)
}
