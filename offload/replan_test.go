package offload_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/offload"
)

// driveToInference offloads the tiny model with cfg and runs forwards until
// INFERENCE; it returns the manager's name.
func driveToInference(t *testing.T, f *fixture, cfg offload.Config) string {
	t.Helper()
	name := uniqueName(t)
	if err := offload.Offload(f.model, &cfg, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { offload.Release(name, true) })
	for i := 0; i < 3; i++ {
		run(t, f.model, f.backend, []int32{4, 5}, 0)
	}
	if p := offload.GetOffloadManager(name).Phase(); p != offload.PhaseInference {
		t.Fatalf("phase %v after 3 forwards", p)
	}
	return name
}

func TestReplanStates(t *testing.T) {
	f := newFixture(t, tinyDir, 0)
	cfg := offload.DefaultConfig(f.dev)
	cfg.GPUBudget = offload.Budget{Bytes: 1200 << 10}
	cfg.TransferBlocks = 2
	name := uniqueName(t)
	if err := offload.Offload(f.model, &cfg, name); err != nil {
		t.Fatal(err)
	}
	defer offload.Release(name, true)
	st := offload.GetStrategyReplanStatus(name)
	if st.State != offload.ReplanIdle || st.CanRequest || st.Applied != nil {
		t.Fatalf("before INFERENCE: %+v", st)
	}
	if _, err := offload.RequestStrategyReplan(name, false); !errors.Is(err, offload.ErrReplanRefused) || !strings.Contains(err.Error(), "DISCOVERY") {
		t.Fatalf("request in DISCOVERY = %v", err)
	}
	prompt := []int32{4, 5, 6}
	want := residentReference(t, tinyDir, prompt, 0)[0]
	for i := 0; i < 3; i++ {
		run(t, f.model, f.backend, prompt, 0)
	}
	if st := offload.GetStrategyReplanStatus(name); st.State != offload.ReplanIdle || !st.CanRequest {
		t.Fatalf("in INFERENCE: %+v", st)
	}
	n, err := offload.RequestStrategyReplan(name, false)
	if err != nil || n != 3 {
		t.Fatalf("RequestStrategyReplan = %d, %v; want 3 forwards", n, err)
	}
	st = offload.GetStrategyReplanStatus(name)
	if st.State != offload.ReplanInProgress || st.CanRequest || st.Applied != nil {
		t.Fatalf("after request: %+v", st)
	}
	if _, err := offload.RequestStrategyReplan(name, false); !errors.Is(err, offload.ErrReplanRefused) || !strings.Contains(err.Error(), "in progress") {
		t.Fatalf("second request = %v", err)
	}
	for i := 0; i < n; i++ {
		if got := run(t, f.model, f.backend, prompt, 0)[0]; !slices.Equal(got, want) {
			t.Fatalf("forward %d of the replan computed something else", i)
		}
	}
	st = offload.GetStrategyReplanStatus(name)
	if st.State != offload.ReplanDone || !st.CanRequest || st.Applied == nil {
		t.Fatalf("after %d forwards: %+v", n, st)
	}
	if got := run(t, f.model, f.backend, prompt, 0)[0]; !slices.Equal(got, want) {
		t.Fatal("after the replan the model computes something else")
	}
	usage, err := offload.GetGPUMemoryUsage(name)
	if err != nil || usage.TotalBytes > 1200<<10 {
		t.Fatalf("after replan: usage %+v, %v", usage, err)
	}
	// A done replan may be requested again.
	if _, err := offload.RequestStrategyReplan(name, false); err != nil {
		t.Fatalf("request after done = %v", err)
	}
}

// TestReplanApplies: starting from a deliberately poor plan (everything
// streamed although the budget holds half the model), the replan rebuilds
// the placement, and the model still computes the same.
func TestReplanApplies(t *testing.T) {
	prompt := []int32{7, 8, 9}
	pdir, _ := profiled(t, tinyDir, prompt)
	st, err := offload.ReadProfile(pdir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range st.Plan.Resident {
		st.Plan.Resident[i] = false
	}
	st.Plan.Slots = 2
	for i := range st.Plan.SlotOf {
		st.Plan.SlotOf[i] = i % 2
	}
	want := residentReference(t, tinyDir, prompt, 2)
	f := newFixture(t, tinyDir, 0)
	name := uniqueName(t)
	cfg := offload.DefaultConfig(f.dev)
	cfg.TransferBudgetScale = 500 // copies look slow: streaming everything is a poor plan
	if err := offload.OffloadFromState(f.model, st, &cfg, name, true); err != nil {
		t.Fatal(err)
	}
	defer offload.Release(name, true)
	if res := offload.ResidentUnits(name); len(res) != 0 {
		t.Fatalf("adopted plan keeps %d units resident", len(res))
	}
	n, err := offload.RequestStrategyReplan(name, false)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		run(t, f.model, f.backend, prompt, 0)
	}
	s := offload.GetStrategyReplanStatus(name)
	if s.State != offload.ReplanDone || s.Applied == nil || !*s.Applied {
		t.Fatalf("status %+v; want an applied rebuild", s)
	}
	if res := offload.ResidentUnits(name); len(res) == 0 {
		t.Fatal("the rebuilt plan keeps nothing resident although the budget allows it")
	}
	got := run(t, f.model, f.backend, prompt, 2)
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("after the rebuild, pass %d differs", i)
		}
	}
	if u, _ := offload.GetGPUMemoryUsage(name); u.TotalBytes > st.BudgetBytes {
		t.Fatalf("rebuilt plan holds %d bytes over the %d budget", u.TotalBytes, st.BudgetBytes)
	}
}

// TestReplanFailure: a rebuild whose allocation fails leaves status failed,
// refuses further requests, and makes forwards error instead of computing.
func TestReplanFailure(t *testing.T) {
	prompt := []int32{7, 8, 9}
	pdir, _ := profiled(t, tinyDir, prompt)
	st, _ := offload.ReadProfile(pdir)
	for i := range st.Plan.Resident {
		st.Plan.Resident[i] = false
		st.Plan.SlotOf[i] = i % 2
	}
	st.Plan.Slots = 2
	f := newFixture(t, tinyDir, 0)
	name := uniqueName(t)
	cfg := offload.DefaultConfig(f.dev)
	cfg.TransferBudgetScale = 500 // copies look slow: streaming everything is a poor plan
	if err := offload.OffloadFromState(f.model, st, &cfg, name, true); err != nil {
		t.Fatal(err)
	}
	n, _ := offload.RequestStrategyReplan(name, false)
	for i := 0; i < n-1; i++ {
		run(t, f.model, f.backend, prompt, 0)
	}
	injected := errors.New("injected allocation failure")
	f.dev.AllocFault = func(label string, _ int64) error {
		if strings.Contains(label, "resident unit") {
			return injected
		}
		return nil
	}
	cache, _ := f.model.NewKVCache(f.backend, 8)
	_, err := f.model.Forward(f.backend, cache, prompt, false)
	cache.Free()
	f.dev.AllocFault = nil
	if !errors.Is(err, injected) {
		t.Fatalf("the rebuilding forward returned %v; want the injected failure", err)
	}
	s := offload.GetStrategyReplanStatus(name)
	if s.State != offload.ReplanFailed || s.CanRequest || s.Applied == nil || *s.Applied {
		t.Fatalf("status after a failed rebuild: %+v", s)
	}
	cache, _ = f.model.NewKVCache(f.backend, 8)
	defer cache.Free()
	if _, err := f.model.Forward(f.backend, cache, prompt, false); !errors.Is(err, offload.ErrEngineFailed) {
		t.Fatalf("forward after a failed replan = %v; want ErrEngineFailed", err)
	}
	if _, err := offload.RequestStrategyReplan(name, false); !errors.Is(err, offload.ErrReplanRefused) {
		t.Fatalf("request after failure = %v", err)
	}
	if err := offload.Release(name, true); err != nil {
		t.Fatal(err)
	}
	cache.Free()
	f.model.Close() // frees the activations the model keeps on the device
	if m := f.dev.Memory(); m.InUse != 0 {
		t.Fatalf("device bytes after Release: %d", m.InUse)
	}
	if h := f.dev.HostMemory(); h.InUse != 0 {
		t.Fatalf("pinned bytes after Release: %d", h.InUse)
	}
}

// TestReplanManual: with manualUpdateState, forwards do not advance the
// replan; UpdateState does, once per replay generation.
func TestReplanManual(t *testing.T) {
	f := newFixture(t, tinyDir, 0)
	cfg := offload.DefaultConfig(f.dev)
	cfg.GPUBudget = offload.Budget{Bytes: 1200 << 10}
	cfg.TransferBlocks = 2
	name := driveToInference(t, f, cfg)
	n, err := offload.RequestStrategyReplan(name, true)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n+2; i++ {
		run(t, f.model, f.backend, []int32{4}, 0)
	}
	if s := offload.GetStrategyReplanStatus(name); s.State != offload.ReplanInProgress {
		t.Fatalf("forwards advanced a manual replan: %+v", s)
	}
	for gen := 0; gen < n; gen++ {
		run(t, f.model, f.backend, []int32{4}, 0)
		for rep := 0; rep < 2; rep++ { // the same generation counts once
			if err := offload.UpdateState(name, gen); err != nil {
				t.Fatal(err)
			}
		}
		want := offload.ReplanInProgress
		if gen == n-1 {
			want = offload.ReplanDone
		}
		if s := offload.GetStrategyReplanStatus(name); s.State != want {
			t.Fatalf("after generation %d: %+v, want %s", gen, s, want)
		}
	}
}

func TestCompileFunctions(t *testing.T) {
	f := newFixture(t, tinyDir, 0)
	cfg := offload.DefaultConfig(f.dev)
	name := uniqueName(t)
	err := offload.Offload(f.model, &cfg, name, offload.WithCompile(offload.GraphCompiler(f.dev.Name(), nil)))
	if !errors.Is(err, offload.ErrNoGraphs) || !strings.Contains(err.Error(), "cpu") || !strings.Contains(err.Error(), "model.layers.0") {
		t.Fatalf("graph compiler on the CPU = %v", err)
	}
	if m := f.dev.Memory(); m.InUse != 0 {
		t.Fatalf("refused Offload left %d device bytes", m.InUse)
	}
	var compiled []string
	err = offload.Offload(f.model, &cfg, name, offload.WithCompile(func(u nn.Module) error {
		compiled = append(compiled, u.Node().Name())
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer offload.Release(name, true)
	if !slices.Equal(compiled, []string{"model.layers.0", "model.layers.1", "model.layers.2", "model.layers.3"}) {
		t.Fatalf("compiled %v", compiled)
	}
}

// TestTimingGraphMode: in graph mode, each pass measured and then stored by
// UpdateOffloadTiming is one snapshot of the report.
func TestTimingGraphMode(t *testing.T) {
	f := newFixture(t, tinyDir, 0)
	cfg := offload.DefaultConfig(f.dev)
	cfg.GPUBudget = offload.Budget{Bytes: 1200 << 10}
	cfg.TransferBlocks = 2
	cfg.OffloadTiming = offload.TimingGraph
	name := driveToInference(t, f, cfg)
	offload.ResetOffloadTiming(name)
	for i := 0; i < 3; i++ {
		run(t, f.model, f.backend, []int32{4, 5}, 0)
		if !offload.UpdateOffloadTiming(name, i) {
			t.Fatal("UpdateOffloadTiming failed")
		}
	}
	rep, err := offload.CollectOffloadTiming(name)
	if err != nil || rep == nil {
		t.Fatalf("report %v, %v", rep, err)
	}
	if len(rep.Snapshots) != 3 || len(rep.Traps) != 4 {
		t.Fatalf("%d passes and %d traps; want 3 and 4", len(rep.Snapshots), len(rep.Traps))
	}
	var labels []string
	for _, tr := range rep.Traps {
		labels = append(labels, tr.Trap)
	}
	budgets, err := rep.ComputeBudgetsByProfileLabel(labels, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range rep.Traps {
		if budgets[tr.Trap] <= 0 || tr.ComputeBudgetMs(true) > tr.ComputeBudgetMs(false) {
			t.Errorf("%s: budget %v, conservative %v", tr.Trap, tr.ComputeBudgetMs(false), tr.ComputeBudgetMs(true))
		}
	}
}
