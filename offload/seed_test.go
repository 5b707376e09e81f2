package offload_test

// Tests named after the rows of docs/seed-api.md: each shows one item of
// the Python library's API (../shared/seed/flextensor-python-api.md) as the
// Go library has it.

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// forward runs one prefill of prompt on a fresh cache.
func forward(t *testing.T, f *fixture, prompt []int32) error {
	t.Helper()
	cache, err := f.model.NewKVCache(f.backend, len(prompt))
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Free()
	_, err = f.model.Forward(f.backend, cache, prompt, false)
	return err
}

// streamingConfig streams most of the tiny model's layers through two
// transfer blocks.
func streamingConfig(dev runtime.Device, timing offload.TimingMode) offload.Config {
	cfg := offload.DefaultConfig(dev)
	cfg.GPUBudget = offload.Budget{Bytes: 1200 << 10}
	cfg.TransferBlocks = 2
	cfg.OffloadTiming = timing
	return cfg
}

func TestSeed_DefaultManagerName(t *testing.T) {
	if offload.DefaultManagerName != "default" {
		t.Fatalf("DefaultManagerName = %q", offload.DefaultManagerName)
	}
	a, b := offload.GetOffloadManager(""), offload.GetOffloadManager(offload.DefaultManagerName)
	if a != b || a.Name() != "default" {
		t.Fatalf(`GetOffloadManager("") = %p %q, GetOffloadManager("default") = %p`, a, a.Name(), b)
	}
	if c := offload.GetOffloadManager(uniqueName(t)); c == a {
		t.Fatal("a named manager is the default one")
	}
}

func TestSeed_InitAndSetConfig(t *testing.T) {
	f := newFixture(t, tinyDir, 0)
	name := uniqueName(t)
	cfg := offload.DefaultConfig(f.dev)
	cfg.ProfilingIters = 3
	if err := offload.Init(cfg, name); err != nil {
		t.Fatal(err)
	}
	if got := offload.GetOffloadManager(name).Config(); got.ProfilingIters != 3 || got.Device != f.dev {
		t.Fatalf("config after Init: %+v", got)
	}
	cfg.ProfilingIters = 4
	if err := offload.SetConfig(cfg, name); err != nil {
		t.Fatal(err)
	}
	if got := offload.GetOffloadManager(name).Config(); got.ProfilingIters != 4 {
		t.Fatalf("SetConfig did not apply: %+v", got)
	}
	bad := cfg
	bad.Device = nil
	if err := offload.SetConfig(bad, name); err == nil || !strings.Contains(err.Error(), "Device") {
		t.Fatalf("SetConfig without a device = %v", err)
	}
	// Offload with a nil config uses the manager's.
	if err := offload.Offload(f.model, nil, name); err != nil {
		t.Fatal(err)
	}
	defer offload.Release(name, true)
	if err := offload.SetConfig(cfg, name); err == nil || !strings.Contains(err.Error(), "Release") {
		t.Fatalf("SetConfig while offloaded = %v", err)
	}
}

// TestSeed_OffloadBlock: a manual trap runs inside a forward, its time is
// a row of the timing report, and it refuses to run outside one.
func TestSeed_OffloadBlock(t *testing.T) {
	f := newFixture(t, tinyDir, 0)
	name := driveToInference(t, f, streamingConfig(f.dev, offload.TimingEager))
	blk, err := offload.OffloadBlock("sampler", name)
	if err != nil {
		t.Fatal(err)
	}
	if err := blk.Run(func() error { return nil }); err == nil || !strings.Contains(err.Error(), "outside a forward") {
		t.Fatalf("Run outside a forward = %v", err)
	}
	if _, err := offload.OffloadBlock("", name); err == nil {
		t.Fatal("a block without a name was accepted")
	}
	offload.ResetOffloadTiming(name)
	ran := 0
	// A block runs inside a pass of the offloaded model: here a pass of
	// the root that runs no unit, only the block.
	err = nn.Call(f.model, func() error {
		return blk.Run(func() error { ran++; return nil })
	})
	if err != nil || ran != 1 {
		t.Fatalf("Run inside a pass: %v, ran %d", err, ran)
	}
	rep, err := offload.CollectOffloadTiming(name)
	if err != nil || rep == nil {
		t.Fatalf("report %v, %v", rep, err)
	}
	if i := slices.IndexFunc(rep.Traps, func(s offload.TrapTimingStats) bool { return s.Trap == "sampler" }); i < 0 || rep.Traps[i].Passes != 1 {
		t.Fatalf("the block is not a trap of the report: %+v", rep.Traps)
	}
}

// TestSeed_GetGPUMemoryUsage: an error before INFERENCE (the seed's
// RuntimeError), the engine's bytes after.
func TestSeed_GetGPUMemoryUsage(t *testing.T) {
	f := newFixture(t, tinyDir, 0)
	name := uniqueName(t)
	cfg := streamingConfig(f.dev, offload.TimingOff)
	if err := offload.Offload(f.model, &cfg, name); err != nil {
		t.Fatal(err)
	}
	defer offload.Release(name, true)
	if _, err := offload.GetGPUMemoryUsage(name); !errors.Is(err, offload.ErrNotInference) {
		t.Fatalf("before INFERENCE: %v", err)
	}
	for i := 0; i < 3; i++ {
		if err := forward(t, f, []int32{1, 2}); err != nil {
			t.Fatal(err)
		}
	}
	u, err := offload.GetGPUMemoryUsage(name)
	if err != nil {
		t.Fatal(err)
	}
	if u.TransferBlockBytes <= 0 || u.TotalBytes != u.TransferBlockBytes+u.ResidentBytes || u.TotalBytes > cfg.GPUBudget.Bytes {
		t.Fatalf("usage %+v with a budget of %d", u, cfg.GPUBudget.Bytes)
	}
	if u.MB() != float64(u.TotalBytes)/(1<<20) {
		t.Fatalf("MB() = %v for %d bytes", u.MB(), u.TotalBytes)
	}
}

// saveTinyProfile profiles the tiny model and saves it in a new directory.
func saveTinyProfile(t *testing.T) string {
	t.Helper()
	f := newFixture(t, tinyDir, 0)
	name := driveToInference(t, f, streamingConfig(f.dev, offload.TimingOff))
	dir := filepath.Join(t.TempDir(), "profile")
	if err := offload.SaveProfile(dir, name); err != nil {
		t.Fatal(err)
	}
	if err := offload.Release(name, true); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestSeed_SaveProfileDefaultDir: SaveProfile("") writes to the
// configuration's ProfileDir, and refuses without one or when read-only.
func TestSeed_SaveProfileDefaultDir(t *testing.T) {
	f := newFixture(t, tinyDir, 0)
	cfg := streamingConfig(f.dev, offload.TimingOff)
	cfg.ProfileDir = filepath.Join(t.TempDir(), "p")
	name := driveToInference(t, f, cfg)
	if err := offload.SaveProfile("", name); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(cfg.ProfileDir, offload.ProfileFileName)); err != nil {
		t.Fatalf("SaveProfile(\"\") did not write to ProfileDir: %v", err)
	}
}

// TestSeed_LoadProfileIntoManager: LoadProfile loads into the named
// manager, so the next Offload skips DISCOVERY and PROFILING; "" is the
// configuration's ProfileDir, not the working directory; a profile loaded
// for one model refuses another; a manager holding a model adopts the
// profile for it at once.
func TestSeed_LoadProfileIntoManager(t *testing.T) {
	pdir := saveTinyProfile(t)
	want := residentReference(t, tinyDir, []int32{5, 6, 7}, 2)

	t.Run("next Offload skips warm-up", func(t *testing.T) {
		f := newFixture(t, tinyDir, 0)
		name := uniqueName(t)
		cfg := streamingConfig(f.dev, offload.TimingOff)
		cfg.ProfileDir = pdir
		if err := offload.Init(cfg, name); err != nil {
			t.Fatal(err)
		}
		if err := offload.LoadProfile("", nil, name); err != nil {
			t.Fatal(err)
		}
		if err := offload.Offload(f.model, nil, name); err != nil {
			t.Fatal(err)
		}
		defer offload.Release(name, true)
		if p := offload.GetOffloadManager(name).Phase(); p != offload.PhaseInference {
			t.Fatalf("phase after LoadProfile and Offload: %v, want INFERENCE", p)
		}
		got := run(t, f.model, f.backend, []int32{5, 6, 7}, 2)
		for i := range want {
			if !slices.Equal(got[i], want[i]) {
				t.Fatalf("pass %d differs from the resident model", i)
			}
		}
	})

	t.Run("no directory", func(t *testing.T) {
		f := newFixture(t, tinyDir, 0)
		name := uniqueName(t)
		if err := offload.Init(offload.DefaultConfig(f.dev), name); err != nil {
			t.Fatal(err)
		}
		// Even with a profile.json in the working directory, "" without a
		// ProfileDir is an error, not ./profile.json.
		err := offload.LoadProfile("", nil, name)
		if err == nil || !strings.Contains(err.Error(), "ProfileDir") {
			t.Fatalf("LoadProfile(\"\") without ProfileDir = %v", err)
		}
	})

	t.Run("another model", func(t *testing.T) {
		f := newFixture(t, tinyDir, 0)
		other, _ := hostModel(t, tinyDir)
		name := uniqueName(t)
		cfg := streamingConfig(f.dev, offload.TimingOff)
		if err := offload.Init(cfg, name); err != nil {
			t.Fatal(err)
		}
		if err := offload.LoadProfile(pdir, f.model, name); err != nil {
			t.Fatal(err)
		}
		if err := offload.Offload(other, nil, name); err == nil || !strings.Contains(err.Error(), "another model") {
			t.Fatalf("Offload of another model after LoadProfile = %v", err)
		}
		// The profile was used up: a plain Offload now starts DISCOVERY.
		if err := offload.Offload(other, nil, name); err != nil {
			t.Fatal(err)
		}
		defer offload.Release(name, true)
		if p := offload.GetOffloadManager(name).Phase(); p != offload.PhaseDiscovery {
			t.Fatalf("phase %v", p)
		}
	})

	t.Run("current model", func(t *testing.T) {
		f := newFixture(t, tinyDir, 0)
		name := uniqueName(t)
		cfg := streamingConfig(f.dev, offload.TimingOff)
		if err := offload.Offload(f.model, &cfg, name); err != nil {
			t.Fatal(err)
		}
		defer offload.Release(name, true)
		if err := offload.LoadProfile(pdir, nil, name); err != nil {
			t.Fatal(err)
		}
		if p := offload.GetOffloadManager(name).Phase(); p != offload.PhaseInference {
			t.Fatalf("phase after LoadProfile into the running manager: %v", p)
		}
		got := run(t, f.model, f.backend, []int32{5, 6, 7}, 2)
		if !slices.Equal(got[2], want[2]) {
			t.Fatal("the adopted profile computes something else")
		}
	})
}

// TestSeed_OffloadFromProfile: Init, load and offload in one call, straight
// into INFERENCE.
func TestSeed_OffloadFromProfile(t *testing.T) {
	pdir := saveTinyProfile(t)
	f := newFixture(t, tinyDir, 0)
	name := uniqueName(t)
	cfg := streamingConfig(f.dev, offload.TimingOff)
	if err := offload.OffloadFromProfile(f.model, pdir, &cfg, name); err != nil {
		t.Fatal(err)
	}
	defer offload.Release(name, true)
	if p := offload.GetOffloadManager(name).Phase(); p != offload.PhaseInference {
		t.Fatalf("phase %v", p)
	}
}

// TestSeed_OffloadFromStateNoReplan: allowStrategyReplan false refuses a
// replan (CanRequest false); true allows it.
func TestSeed_OffloadFromStateNoReplan(t *testing.T) {
	pdir := saveTinyProfile(t)
	st, err := offload.ReadProfile(pdir)
	if err != nil {
		t.Fatal(err)
	}
	for _, allow := range []bool{false, true} {
		t.Run(fmt.Sprint("allow=", allow), func(t *testing.T) {
			f := newFixture(t, tinyDir, 0)
			name := uniqueName(t)
			cfg := streamingConfig(f.dev, offload.TimingOff)
			if err := offload.OffloadFromState(f.model, st, &cfg, name, allow); err != nil {
				t.Fatal(err)
			}
			defer offload.Release(name, true)
			s := offload.GetStrategyReplanStatus(name)
			if s.CanRequest != allow || s.State != offload.ReplanIdle || s.Applied != nil {
				t.Fatalf("status %+v", s)
			}
			n, err := offload.RequestStrategyReplan(name, false)
			if allow {
				if err != nil || n <= 0 {
					t.Fatalf("RequestStrategyReplan = %d, %v", n, err)
				}
				return
			}
			if !errors.Is(err, offload.ErrReplanRefused) || !strings.Contains(err.Error(), "allowStrategyReplan") || n != 0 {
				t.Fatalf("RequestStrategyReplan = %d, %v; want a refusal", n, err)
			}
			if s := offload.GetStrategyReplanStatus(name); s.State != offload.ReplanIdle {
				t.Fatalf("a refused replan ran: %+v", s)
			}
		})
	}
}

// TestSeed_ReleasePreserveModel: Release(preserveModel) gives the model its
// own tensors back; Release(false) leaves them to be discarded.
func TestSeed_ReleasePreserveModel(t *testing.T) {
	f := newFixture(t, tinyDir, 0)
	orig := map[string]*runtime.Tensor{}
	for _, p := range nn.Parameters(f.model) {
		orig[p.Name()] = p.Peek()
	}
	name := driveToInference(t, f, streamingConfig(f.dev, offload.TimingOff))
	if err := offload.Release(name, true); err != nil {
		t.Fatal(err)
	}
	for _, p := range nn.Parameters(f.model) {
		if p.Peek() != orig[p.Name()] {
			t.Fatalf("%s is not bound to its own tensor after Release(true)", p.Name())
		}
	}
	name = driveToInference(t, f, streamingConfig(f.dev, offload.TimingOff))
	if err := offload.Release(name, false); err != nil {
		t.Fatal(err)
	}
	if m := f.dev.Memory(); m.InUse-f.model.WorkspaceBytes() != 0 {
		t.Fatalf("Release(false) left %d engine bytes on the device", m.InUse-f.model.WorkspaceBytes())
	}
}

// TestSeed_ClearProfilingDurations: samples taken before the clear are
// dropped; the phase's pass count is not.
func TestSeed_ClearProfilingDurations(t *testing.T) {
	f := newFixture(t, tinyDir, 0)
	name := uniqueName(t)
	cfg := streamingConfig(f.dev, offload.TimingOff)
	cfg.ProfilingIters = 3
	if err := offload.Offload(f.model, &cfg, name); err != nil {
		t.Fatal(err)
	}
	defer offload.Release(name, true)
	for i := 0; i < 3; i++ { // discovery, two profiling passes
		if err := forward(t, f, []int32{1, 2}); err != nil {
			t.Fatal(err)
		}
	}
	offload.ClearProfilingDurations(name)
	if err := forward(t, f, []int32{1, 2}); err != nil { // the third profiling pass
		t.Fatal(err)
	}
	mgr := offload.GetOffloadManager(name)
	if p := mgr.Phase(); p != offload.PhaseInference {
		t.Fatalf("phase %v: clearing durations must not reset the pass count", p)
	}
	st, err := mgr.State()
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range st.Units {
		if len(u.Samples) != 1 {
			t.Fatalf("unit %s has %d samples; want the one taken after the clear", u.Name, len(u.Samples))
		}
	}
}

// TestSeed_SuspendDisabled: with Enabled false, suspend, resume and pause
// are no-ops: nothing is counted, an unmatched resume is no error, and a
// suspension taken while disabled does not leak into a later enabled
// Offload (which leaves PROFILING as usual).
func TestSeed_SuspendDisabled(t *testing.T) {
	f := newFixture(t, tinyDir, 0)
	name := uniqueName(t)
	mgr := offload.GetOffloadManager(name)
	if err := offload.Init(offload.Config{Enabled: false}, name); err != nil {
		t.Fatal(err)
	}
	offload.SuspendProfiling(name)
	resume := offload.PauseProfiling(name)
	resume()
	if n := mgr.Suspensions(); n != 0 {
		t.Fatalf("disabled manager counts %d suspensions", n)
	}
	if err := offload.ResumeProfiling(name); err != nil {
		t.Fatalf("ResumeProfiling on a disabled manager = %v", err)
	}
	if err := offload.Offload(f.model, nil, name); err != nil || mgr.Phase() != offload.PhaseIdle {
		t.Fatalf("disabled Offload = %v, phase %v", err, mgr.Phase())
	}
	offload.SuspendProfiling(name) // while disabled: nothing
	cfg := offload.DefaultConfig(f.dev)
	if err := offload.Offload(f.model, &cfg, name); err != nil {
		t.Fatal(err)
	}
	defer offload.Release(name, true)
	for i := 0; i < 3; i++ {
		if err := forward(t, f, []int32{1}); err != nil {
			t.Fatal(err)
		}
	}
	if p := mgr.Phase(); p != offload.PhaseInference {
		t.Fatalf("phase %v after 3 forwards: a suspension taken while disabled leaked", p)
	}
}

// TestSeed_PauseProfilingNests: the returned resume shares the count with
// SuspendProfiling/ResumeProfiling, resumes once however often it is
// called, and recording resumes only when every suspension is released.
func TestSeed_PauseProfilingNests(t *testing.T) {
	f := newFixture(t, tinyDir, 0)
	name := uniqueName(t)
	cfg := offload.DefaultConfig(f.dev)
	if err := offload.Offload(f.model, &cfg, name); err != nil {
		t.Fatal(err)
	}
	defer offload.Release(name, true)
	mgr := offload.GetOffloadManager(name)
	offload.SuspendProfiling(name)
	resume := offload.PauseProfiling(name)
	if n := mgr.Suspensions(); n != 2 {
		t.Fatalf("%d suspensions, want 2", n)
	}
	resume()
	resume()
	if n := mgr.Suspensions(); n != 1 {
		t.Fatalf("%d suspensions after resume() twice, want 1", n)
	}
	if err := offload.ResumeProfiling(name); err != nil {
		t.Fatal(err)
	}
	if err := offload.ResumeProfiling(name); !errors.Is(err, offload.ErrUnbalanced) {
		t.Fatalf("extra ResumeProfiling = %v", err)
	}
}

// TestSeed_SuspendDiscoveryRecords: a suspension does not stop DISCOVERY
// (its parameter reads are needed) and freezes PROFILING's pass count.
func TestSeed_SuspendDiscoveryRecords(t *testing.T) {
	f := newFixture(t, tinyDir, 0)
	name := uniqueName(t)
	cfg := offload.DefaultConfig(f.dev)
	if err := offload.Offload(f.model, &cfg, name); err != nil {
		t.Fatal(err)
	}
	defer offload.Release(name, true)
	mgr := offload.GetOffloadManager(name)
	defer mgr.PauseProfiling()()
	if err := forward(t, f, []int32{1}); err != nil {
		t.Fatal(err)
	}
	if p := mgr.Phase(); p != offload.PhaseProfiling {
		t.Fatalf("a suspended DISCOVERY pass did not count: %v", p)
	}
	for i := 0; i < 4; i++ {
		if err := forward(t, f, []int32{1}); err != nil {
			t.Fatal(err)
		}
	}
	if p := mgr.Phase(); p != offload.PhaseProfiling {
		t.Fatalf("suspended PROFILING passes counted: %v", p)
	}
}

// TestSeed_CollectOffloadTimingDrains: a collect drains the window; a
// second returns nil until new passes; ResetOffloadTiming drops the window;
// before any model, after Release and with timing off, it returns nil
// without an error.
func TestSeed_CollectOffloadTimingDrains(t *testing.T) {
	if rep, err := offload.CollectOffloadTiming(uniqueName(t)); rep != nil || err != nil {
		t.Fatalf("before any engine: %v, %v; want nil, nil", rep, err)
	}
	f := newFixture(t, tinyDir, 0)
	name := driveToInference(t, f, streamingConfig(f.dev, offload.TimingEager))
	offload.ResetOffloadTiming(name)
	for i := 0; i < 2; i++ {
		run(t, f.model, f.backend, []int32{4}, 0)
	}
	rep, err := offload.CollectOffloadTiming(name)
	if err != nil || rep.NumPasses() != 2 {
		t.Fatalf("first collect: %v passes, %v", rep.NumPasses(), err)
	}
	if rep, err := offload.CollectOffloadTiming(name); rep != nil || err != nil {
		t.Fatalf("second collect returned %d passes again (%v)", rep.NumPasses(), err)
	}
	run(t, f.model, f.backend, []int32{4}, 0)
	if rep, _ := offload.CollectOffloadTiming(name); rep.NumPasses() != 1 || rep.Snapshots[0].Pass != 2 {
		t.Fatalf("after one more pass: %d passes", rep.NumPasses())
	}
	run(t, f.model, f.backend, []int32{4}, 0)
	offload.ResetOffloadTiming(name) // a fresh window: the pass is dropped
	if rep, err := offload.CollectOffloadTiming(name); rep != nil || err != nil {
		t.Fatalf("after ResetOffloadTiming: %d passes, %v", rep.NumPasses(), err)
	}
	offload.Release(name, true)
	if rep, err := offload.CollectOffloadTiming(name); rep != nil || err != nil {
		t.Fatalf("after Release: %v, %v", rep, err)
	}
	off := driveToInference(t, f, streamingConfig(f.dev, offload.TimingOff))
	if rep, err := offload.CollectOffloadTiming(off); rep != nil || err != nil {
		t.Fatalf("timing off: %v, %v", rep, err)
	}
}

// TestSeed_UpdateOffloadTimingGeneration: in graph mode a measured pass
// counts once stored, and a replay generation already stored is not stored
// again; -1 stores each time there is a pass.
func TestSeed_UpdateOffloadTimingGeneration(t *testing.T) {
	f := newFixture(t, tinyDir, 0)
	name := driveToInference(t, f, streamingConfig(f.dev, offload.TimingGraph))
	offload.ResetOffloadTiming(name)
	step := func(gen int) {
		run(t, f.model, f.backend, []int32{4}, 0)
		if !offload.UpdateOffloadTiming(name, gen) {
			t.Fatal("UpdateOffloadTiming failed")
		}
	}
	step(7)
	step(7) // the same replay reported again: not stored
	step(8)
	run(t, f.model, f.backend, []int32{4}, 0) // measured, never stored
	step(-1)
	offload.UpdateOffloadTiming(name, -1) // nothing pending
	rep, err := offload.CollectOffloadTiming(name)
	if err != nil || rep.NumPasses() != 3 {
		t.Fatalf("%d passes stored (%v); want 3 (gen 7, gen 8, one with -1)", rep.NumPasses(), err)
	}
}

// timingReport is a hand-made report of two passes over two traps.
func timingReport() *offload.OffloadTimingReport {
	p0 := offload.OffloadTimingSnapshot{Pass: 0, Records: []offload.TrapTimingRecord{
		{Trap: "l0", Streamed: true, Bytes: 1 << 20, TransferMs: 2, ComputeMs: 1, WaitMs: 1},
		{Trap: "l1", ComputeMs: 3},
	}}
	p1 := offload.OffloadTimingSnapshot{Pass: 1, Records: []offload.TrapTimingRecord{
		{Trap: "l0", Streamed: true, Bytes: 1 << 20, TransferMs: 4, ComputeMs: 5, WaitMs: 0},
		{Trap: "l1", ComputeMs: 7},
	}}
	return &offload.OffloadTimingReport{Snapshots: []offload.OffloadTimingSnapshot{p0, p1}, Traps: []offload.TrapTimingStats{
		{Trap: "l0", Streamed: true, Passes: 2, TransferMs: []float64{2, 4}, ComputeMs: []float64{1, 5}, WaitMs: []float64{1, 0}},
		{Trap: "l1", Passes: 2, TransferMs: []float64{0, 0}, ComputeMs: []float64{3, 7}, WaitMs: []float64{0, 0}},
	}}
}

// TestSeed_ComputeBudgetMsConservative: the median, or with conservative
// the smallest sample (the tightest window); always positive.
func TestSeed_ComputeBudgetMsConservative(t *testing.T) {
	s := offload.TrapTimingStats{ComputeMs: []float64{4, 1.5, 9}}
	if b := s.ComputeBudgetMs(false); b != 4 {
		t.Errorf("median budget %v, want 4", b)
	}
	if b := s.ComputeBudgetMs(true); b != 1.5 {
		t.Errorf("conservative budget %v, want the smallest sample 1.5", b)
	}
	for _, empty := range []offload.TrapTimingStats{{}, {ComputeMs: []float64{0, 0}}} {
		for _, c := range []bool{false, true} {
			if b := empty.ComputeBudgetMs(c); !(b > 0) || b != offload.MinComputeBudgetMs {
				t.Errorf("budget of %v (conservative %v) = %v; want MinComputeBudgetMs", empty.ComputeMs, c, b)
			}
		}
	}
}

// TestSeed_ComputeBudgetsByProfileLabel: row i pairs with label i; the
// labels must match the rows one to one.
func TestSeed_ComputeBudgetsByProfileLabel(t *testing.T) {
	r := timingReport()
	got, err := r.ComputeBudgetsByProfileLabel([]string{"model.layers.0", "model.layers.1"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["model.layers.0"] != 3 || got["model.layers.1"] != 5 {
		t.Fatalf("budgets %v", got)
	}
	if got, _ := r.ComputeBudgetsByProfileLabel([]string{"a", "b"}, true); got["a"] != 1 || got["b"] != 3 {
		t.Fatalf("conservative budgets %v", got)
	}
	for _, labels := range [][]string{{"a"}, {"a", "b", "c"}, {"a", ""}, {"a", "a"}} {
		if _, err := r.ComputeBudgetsByProfileLabel(labels, false); err == nil {
			t.Errorf("labels %q accepted", labels)
		}
	}
}

// TestSeed_TimingTotals: pass totals on a snapshot, their sums and
// averages on a report, and min/max/avg/median/std per column of a trap.
func TestSeed_TimingTotals(t *testing.T) {
	r := timingReport()
	s := r.Snapshots[0]
	if s.TotalComputeMs() != 4 || s.TotalTransferMs() != 2 || s.TotalWaitMs() != 1 {
		t.Fatalf("snapshot totals %v %v %v", s.TotalComputeMs(), s.TotalTransferMs(), s.TotalWaitMs())
	}
	if r.NumPasses() != 2 || r.TotalComputeSum() != 16 || r.TotalTransferSum() != 6 || r.TotalWaitSum() != 1 {
		t.Fatalf("sums: %d passes, compute %v, transfer %v, wait %v", r.NumPasses(), r.TotalComputeSum(), r.TotalTransferSum(), r.TotalWaitSum())
	}
	if r.TotalComputeAvg() != 8 || r.TotalTransferAvg() != 3 || r.TotalWaitAvg() != 0.5 {
		t.Fatalf("averages %v %v %v", r.TotalComputeAvg(), r.TotalTransferAvg(), r.TotalWaitAvg())
	}
	var none *offload.OffloadTimingReport
	if none.NumPasses() != 0 || none.TotalComputeAvg() != 0 {
		t.Fatal("a nil report has passes")
	}
	c := r.Traps[0].ComputeStats()
	if c != (offload.SampleStats{Min: 1, Max: 5, Avg: 3, Median: 3, Std: 2}) {
		t.Fatalf("compute stats %+v", c)
	}
	tr := r.Traps[0].TransferStats()
	if tr.Min != 2 || tr.Max != 4 || tr.Avg != 3 || tr.Median != 3 || tr.Std != 1 {
		t.Fatalf("transfer stats %+v", tr)
	}
	w := r.Traps[0].WaitStats()
	if w.Min != 0 || w.Max != 1 || w.Avg != 0.5 || math.Abs(w.Std-0.5) > 1e-12 {
		t.Fatalf("wait stats %+v", w)
	}
}

// TestSeed_TimingReportLive: a report from real passes has one row per
// unit per pass and totals that add up.
func TestSeed_TimingReportLive(t *testing.T) {
	f := newFixture(t, tinyDir, 0)
	name := driveToInference(t, f, streamingConfig(f.dev, offload.TimingEager))
	offload.ResetOffloadTiming(name)
	run(t, f.model, f.backend, []int32{4, 5, 6}, 1)
	rep, err := offload.CollectOffloadTiming(name)
	if err != nil || rep.NumPasses() != 2 {
		t.Fatalf("%d passes, %v", rep.NumPasses(), err)
	}
	var sum float64
	for _, s := range rep.Snapshots {
		if len(s.Records) != len(rep.Traps) {
			t.Fatalf("pass %d has %d records for %d traps", s.Pass, len(s.Records), len(rep.Traps))
		}
		sum += s.TotalComputeMs()
	}
	if !(sum > 0) || math.Abs(rep.TotalComputeSum()-sum) > 1e-9 {
		t.Fatalf("compute sum %v, passes add to %v", rep.TotalComputeSum(), sum)
	}
	streamed := 0
	for _, tr := range rep.Traps {
		if tr.Streamed {
			streamed++
			if st := tr.TransferStats(); !(st.Min > 0) || st.Max < st.Min {
				t.Errorf("%s: transfer stats %+v", tr.Trap, st)
			}
		}
	}
	if streamed == 0 {
		t.Fatal("no streamed unit measured")
	}
}

// TestSeed_FormatOffloadTimingTable: a report or a single pass.
func TestSeed_FormatOffloadTimingTable(t *testing.T) {
	r := timingReport()
	rt := offload.FormatOffloadTimingTable(r)
	if !strings.Contains(rt, "l0") || !strings.Contains(rt, "streamed") || !strings.Contains(rt, "average of 2") {
		t.Fatalf("report table:\n%s", rt)
	}
	st := offload.FormatOffloadTimingTable(r.Snapshots[1])
	if !strings.Contains(st, "l1") || !strings.Contains(st, "pass 1 totals") || !strings.Contains(st, "compute 12.000 ms") {
		t.Fatalf("snapshot table:\n%s", st)
	}
	if pt := offload.FormatOffloadTimingTable(&r.Snapshots[1]); pt != st {
		t.Fatalf("a snapshot by pointer renders differently:\n%s", pt)
	}
	var nilRep *offload.OffloadTimingReport
	for _, d := range []offload.TimingData{nil, nilRep, (*offload.OffloadTimingSnapshot)(nil)} {
		if s := offload.FormatOffloadTimingTable(d); !strings.Contains(s, "no measured passes") {
			t.Fatalf("nil data: %q", s)
		}
	}
}

// TestSeed_ExternalCompileActive: true while a model offloaded with a
// compile function is held.
func TestSeed_ExternalCompileActive(t *testing.T) {
	f := newFixture(t, tinyDir, 0)
	name := uniqueName(t)
	mgr := offload.GetOffloadManager(name)
	cfg := offload.DefaultConfig(f.dev)
	if err := offload.Offload(f.model, &cfg, name); err != nil {
		t.Fatal(err)
	}
	if mgr.ExternalCompileActive() {
		t.Fatal("active without a compile function")
	}
	offload.Release(name, true)
	if err := offload.Offload(f.model, &cfg, name, offload.WithCompile(func(nn.Module) error { return nil })); err != nil {
		t.Fatal(err)
	}
	if !mgr.ExternalCompileActive() {
		t.Fatal("not active with a compile function")
	}
	offload.Release(name, true)
	if mgr.ExternalCompileActive() {
		t.Fatal("active after Release")
	}
}

// seedModel is a small custom model: units "blocks.N" each with a nested
// linear layer (x ← x + W·x), then a non-parameter bias added to the
// output (a buffer, placed by PlaceBuffers).
type seedModel struct {
	nn.Base
	Blocks []*seedBlock
	Bias   *runtime.Tensor
	// placedOn records PlaceBuffers' device.
	placedOn runtime.Device
	// skipLast makes the next forward skip the last block.
	skipLast bool
	// idle records, for each forward, what the tree's hooks answered to
	// nn.Tree.InnerTrapsIdle inside the root's Call.
	idle []bool
}

type seedBlock struct {
	nn.Base
	Lin *nn.Linear
}

const seedDim = 16

func newSeedModel(t *testing.T, dev runtime.Device, depth int, seed uint64) *seedModel {
	t.Helper()
	m := &seedModel{}
	nn.Init(m, "")
	c := nn.NewContainer(m, "blocks")
	rng := rand.New(rand.NewPCG(seed, 3))
	for i := 0; i < depth; i++ {
		b := &seedBlock{}
		nn.Attach(c, fmt.Sprint(i), b)
		b.Lin = nn.NewLinear(b, "lin", seedDim, seedDim)
		w, err := runtime.NewTensor(dev, runtime.F32, runtime.Shape{seedDim, seedDim}, b.Lin.Weight.Name())
		if err != nil {
			t.Fatal(err)
		}
		if w.F32() != nil {
			for j := range w.F32() {
				w.F32()[j] = float32(rng.NormFloat64()) / seedDim
			}
		}
		if err := b.Lin.Weight.Bind(w); err != nil {
			t.Fatal(err)
		}
		m.Blocks = append(m.Blocks, b)
	}
	bias, err := runtime.NewTensor(runtime.NewCPU(0), runtime.F32, runtime.Shape{1, seedDim}, "bias")
	if err != nil {
		t.Fatal(err)
	}
	for j := range bias.F32() {
		bias.F32()[j] = float32(j) / 10
	}
	m.Bias = bias
	return m
}

// PlaceBuffers copies the bias to dev (offload.BufferPlacer).
func (m *seedModel) PlaceBuffers(dev runtime.Device) error {
	b, err := runtime.NewTensor(dev, runtime.F32, m.Bias.Shape(), "bias")
	if err != nil {
		return err
	}
	copy(b.F32(), m.Bias.F32())
	m.Bias, m.placedOn = b, dev
	return nil
}

// Forward maps x [1, seedDim] on the backend's device.
func (m *seedModel) Forward(b kernels.Backend, x []float32) ([]float32, error) {
	h, err := runtime.NewTensor(b.Device(), runtime.F32, runtime.Shape{1, seedDim}, "h")
	if err != nil {
		return nil, err
	}
	defer h.Buffer().Free()
	o, err := runtime.NewTensor(b.Device(), runtime.F32, runtime.Shape{1, seedDim}, "o")
	if err != nil {
		return nil, err
	}
	defer o.Buffer().Free()
	copy(h.F32(), x)
	blocks := m.Blocks
	if m.skipLast {
		blocks = blocks[:len(blocks)-1]
	}
	err = nn.Call(m, func() error {
		m.idle = append(m.idle, m.Node().Tree().InnerTrapsIdle())
		for _, blk := range blocks {
			if err := nn.Call(blk, func() error {
				if err := blk.Lin.Forward(b, o, h); err != nil {
					return err
				}
				return b.Add(h, h, o)
			}); err != nil {
				return err
			}
		}
		return b.Add(h, h, m.Bias)
	})
	return slices.Clone(h.F32()), err
}

var seedInput = []float32{1, -2, 3, 0.5, -1, 2, 0, 1, 1, 1, -3, 2, 0.25, -0.5, 4, 1}

// profileSeedModel offloads m with every block streamed through two
// transfer blocks and drives it to INFERENCE.
func profileSeedModel(t *testing.T, m *seedModel, dev runtime.Device) (string, kernels.Backend) {
	t.Helper()
	name := uniqueName(t)
	cfg := offload.DefaultConfig(dev)
	cfg.Include = []string{"blocks.*"}
	cfg.GPUBudget = offload.Budget{Bytes: 2 * seedDim * seedDim * 4}
	cfg.TransferBlocks = 2
	if err := offload.Offload(m, &cfg, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { offload.Release(name, true) })
	k, _ := kernels.NewCPUBackend(dev)
	b := strictBackend{k, dev}
	if err := m.PlaceBuffers(dev); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := m.Forward(b, seedInput); err != nil {
			t.Fatal(err)
		}
	}
	if p := offload.GetOffloadManager(name).Phase(); p != offload.PhaseInference {
		t.Fatalf("phase %v", p)
	}
	if n := len(offload.ResidentUnits(name)); n != 0 {
		t.Fatalf("%d resident units; the test wants all streamed", n)
	}
	return name, b
}

// TestSeed_PassErrorOnCausingPass: a pass that skips the last streamed
// unit fails itself, naming the unit; the next, correct pass succeeds and
// computes what it should.
func TestSeed_PassErrorOnCausingPass(t *testing.T) {
	host, dev := runtime.NewCPU(0), runtime.NewCPU(0)
	ref := newSeedModel(t, host, 4, 1)
	hb, _ := kernels.NewCPUBackend(host)
	want, err := ref.Forward(hb, seedInput)
	if err != nil {
		t.Fatal(err)
	}
	m := newSeedModel(t, host, 4, 1)
	_, b := profileSeedModel(t, m, dev)
	m.skipLast = true
	_, err = m.Forward(b, seedInput)
	if err == nil || !strings.Contains(err.Error(), "blocks.3") || !strings.Contains(err.Error(), "3 of the plan's 4") {
		t.Fatalf("the pass that skipped blocks.3 returned %v", err)
	}
	m.skipLast = false
	for pass := 0; pass < 3; pass++ {
		got, err := m.Forward(b, seedInput)
		if err != nil {
			t.Fatalf("correct pass %d after the short one: %v", pass, err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("pass %d: %v, want %v", pass, got, want)
		}
	}
}

// namedTensors is m's parameters (all but the one named skip) as
// checkpoint tensors sharing the parameters' bytes.
func namedTensors(m nn.Module, skip string) []loader.NamedTensor {
	var ts []loader.NamedTensor
	for _, p := range nn.Parameters(m) {
		if p.Name() != skip {
			ts = append(ts, loader.NamedTensor{Name: p.Name(), DType: p.Peek().DType(), Shape: p.Peek().Shape(), Data: p.Peek().Bytes()})
		}
	}
	return ts
}

// writeSeedCheckpoint writes m's weights (all but skip) as a checkpoint.
func writeSeedCheckpoint(t *testing.T, m nn.Module, skip string) *loader.Checkpoint {
	t.Helper()
	ts := namedTensors(m, skip)
	dir := t.TempDir()
	if err := loader.WriteFile(filepath.Join(dir, loader.SingleFileName), ts, nil); err != nil {
		t.Fatal(err)
	}
	ck, err := loader.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return ck
}

// TestSeed_LoadModelFromProfile: strict lists every missing tensor;
// without it they read as zeros and the report lists them; the buffers go
// to BufferDevice (default: the compute device); Diagnose reports the
// units' nested parameters.
func TestSeed_LoadModelFromProfile(t *testing.T) {
	host := runtime.NewCPU(0)
	src := newSeedModel(t, host, 3, 5)
	name, _ := profileSeedModel(t, src, runtime.NewCPU(0))
	st, err := offload.GetOffloadManager(name).State()
	if err != nil {
		t.Fatal(err)
	}
	if err := offload.Release(name, true); err != nil {
		t.Fatal(err)
	}
	const gone = "blocks.1.lin.weight"
	ck := writeSeedCheckpoint(t, src, gone)
	meta := func() *seedModel { return newSeedModel(t, runtime.NewMeta(), 3, 0) }

	t.Run("strict", func(t *testing.T) {
		dev := runtime.NewCPU(0)
		c := offload.DefaultConfig(dev)
		_, err := offload.LoadModelFromProfile(meta(), ck, st, &c, uniqueName(t), offload.LoadOptions{Strict: true})
		if err == nil || !strings.Contains(err.Error(), gone) || !strings.Contains(err.Error(), "strict") {
			t.Fatalf("strict load with %s missing = %v", gone, err)
		}
		if dev.Memory().InUse != 0 || dev.HostMemory().InUse != 0 {
			t.Fatal("a refused load left memory allocated")
		}
	})

	t.Run("zero-filled, buffers, diagnose", func(t *testing.T) {
		// The reference: the source model with the missing weight zeroed.
		zeroed := newSeedModel(t, host, 3, 5)
		clear(zeroed.Blocks[1].Lin.Weight.Peek().F32())
		hb, _ := kernels.NewCPUBackend(host)
		want, err := zeroed.Forward(hb, seedInput)
		if err != nil {
			t.Fatal(err)
		}
		dev, bufDev := runtime.NewCPU(0), runtime.NewCPU(0)
		for _, explicit := range []bool{false, true} {
			m := meta()
			name := uniqueName(t)
			c := offload.DefaultConfig(dev)
			lo := offload.LoadOptions{Diagnose: true}
			wantBuf := runtime.Device(dev)
			if explicit {
				lo.BufferDevice, wantBuf = bufDev, bufDev
			}
			rep, err := offload.LoadModelFromProfile(m, ck, st, &c, name, lo)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rep.Missing, []string{gone}) || !strings.Contains(rep.String(), gone) {
				t.Fatalf("report %+v", rep)
			}
			if m.placedOn != wantBuf || rep.BufferDevice != wantBuf.Name() {
				t.Fatalf("buffers placed on %v (report %q), want %v", m.placedOn, rep.BufferDevice, wantBuf)
			}
			if len(rep.Units) != 3 || len(rep.Problems) != 0 {
				t.Fatalf("diagnosis: %+v", rep)
			}
			for _, u := range rep.Units {
				if u.Modules != 2 || u.Params != 1 || u.Nested != 1 || u.Resident {
					t.Fatalf("unit diagnosis %+v", u)
				}
			}
			if !explicit {
				k, _ := kernels.NewCPUBackend(dev)
				got, err := m.Forward(strictBackend{k, dev}, seedInput)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("zero-filled model computes %v, want %v", got, want)
				}
			}
			if err := offload.Release(name, false); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestSeed_LoadFromProfileNotStrict: the models' loader (the CLI's
// --profile path) tolerates a tensor missing from the checkpoint unless
// strict, and the error in strict mode lists it.
func TestSeed_LoadFromProfileNotStrict(t *testing.T) {
	pdir := saveTinyProfile(t)
	st, err := offload.ReadProfile(pdir)
	if err != nil {
		t.Fatal(err)
	}
	// A copy of the tiny checkpoint without one layer's up projection.
	const gone = "model.layers.1.mlp.up_proj.weight"
	hm, _ := hostModel(t, tinyDir)
	dir := t.TempDir()
	cfgJSON, err := os.ReadFile(filepath.Join(tinyDir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfgJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	ts := namedTensors(hm, gone)
	if err := loader.WriteFile(filepath.Join(dir, loader.SingleFileName), ts, nil); err != nil {
		t.Fatal(err)
	}
	dev := runtime.NewCPU(0)
	cfg := streamingConfig(dev, offload.TimingOff)
	if _, _, err := models.LoadFromProfile(dir, st, cfg, uniqueName(t), true); !errors.Is(err, offload.ErrProfileMismatch) || !strings.Contains(err.Error(), gone) {
		t.Fatalf("strict load = %v; want ErrProfileMismatch naming %s", err, gone)
	}
	name := uniqueName(t)
	m, ck, err := models.LoadFromProfile(dir, st, cfg, name, false)
	if err != nil {
		t.Fatalf("non-strict load = %v", err)
	}
	defer func() { offload.Release(name, false); m.Close(); ck.Close() }()
	b, _ := kernels.NewCPUBackend(dev)
	cache, _ := m.NewKVCache(b, 4)
	defer cache.Free()
	if _, err := m.Forward(strictBackend{b, dev}, cache, []int32{3, 4}, false); err != nil {
		t.Fatal(err)
	}
}

var _ offload.BufferPlacer = (*seedModel)(nil)

// TestSeed_UpdateStateStoresTiming: with a replan armed for manual
// updates, UpdateState stores the replay's timing in graph mode, once per
// generation, together with UpdateOffloadTiming.
func TestSeed_UpdateStateStoresTiming(t *testing.T) {
	f := newFixture(t, tinyDir, 0)
	name := driveToInference(t, f, streamingConfig(f.dev, offload.TimingGraph))
	offload.ResetOffloadTiming(name)
	n, err := offload.RequestStrategyReplan(name, true)
	if err != nil {
		t.Fatal(err)
	}
	for gen := 0; gen < n; gen++ {
		run(t, f.model, f.backend, []int32{4}, 0)
		if err := offload.UpdateState(name, gen); err != nil {
			t.Fatal(err)
		}
	}
	offload.UpdateOffloadTiming(name, n-1) // the last replay again: not stored twice
	if s := offload.GetStrategyReplanStatus(name); s.State != offload.ReplanDone {
		t.Fatalf("replan %+v after %d updates", s, n)
	}
	rep, err := offload.CollectOffloadTiming(name)
	if err != nil || rep.NumPasses() != n {
		t.Fatalf("%d passes stored (%v); want %d", rep.NumPasses(), err, n)
	}
}
