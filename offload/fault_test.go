package offload_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/llama"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// The faults the tests inject.
var (
	errCopyFault    = errors.New("injected copy fault")
	errAllocFault   = errors.New("injected allocation fault")
	errComputeFault = errors.New("injected compute fault")
)

// injector fails chosen host-to-device copies and device allocations of a
// CPU device through its CopyFault and AllocFault hooks. The hooks are set
// once, before the device's streams exist; what they fail is armed later
// under the injector's mutex (the copy hook runs on the copy stream's
// goroutine).
type injector struct {
	mu         sync.Mutex
	copies     int    // H2D copies run so far
	copyAt     int    // the copy number to fail (0: none)
	allocMatch string // fail an allocation whose label contains this ...
	allocLeft  int    // ... when this count of matching ones reaches zero
}

func inject(dev *runtime.CPUDevice) *injector {
	in := &injector{}
	dev.CopyFault = in.copyHook
	dev.AllocFault = in.allocHook
	return in
}

func (in *injector) copyHook(op string, _ int64) error {
	if op != "H2D copy" {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.copies++
	if in.copies == in.copyAt {
		return errCopyFault
	}
	return nil
}

func (in *injector) allocHook(label string, _ int64) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.allocMatch == "" || !strings.Contains(label, in.allocMatch) {
		return nil
	}
	if in.allocLeft--; in.allocLeft == 0 {
		in.allocMatch = ""
		return fmt.Errorf("%q: %w", label, errAllocFault)
	}
	return nil
}

// failCopy makes the k-th host-to-device copy from now (k ≥ 1) fail.
func (in *injector) failCopy(k int) {
	in.mu.Lock()
	in.copyAt = in.copies + k
	in.mu.Unlock()
}

// copiesRun is the number of host-to-device copies run so far.
func (in *injector) copiesRun() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.copies
}

// failAlloc makes the nth allocation from now whose label contains match fail.
func (in *injector) failAlloc(match string, nth int) {
	in.mu.Lock()
	in.allocMatch, in.allocLeft = match, nth
	in.mu.Unlock()
}

// faultyBackend fails one chosen MatMul call (a unit whose compute returns
// an error); every other call goes to the wrapped backend.
type faultyBackend struct {
	kernels.Backend
	mu     sync.Mutex
	calls  int
	failAt int
}

func (b *faultyBackend) MatMul(out, x, w *runtime.Tensor) error {
	b.mu.Lock()
	b.calls++
	fail := b.calls == b.failAt
	b.mu.Unlock()
	if fail {
		return fmt.Errorf("MatMul with %v: %w", w, errComputeFault)
	}
	return b.Backend.MatMul(out, x, w)
}

// failMatMul makes the k-th MatMul from now fail, once.
func (b *faultyBackend) failMatMul(k int) {
	b.mu.Lock()
	b.failAt = b.calls + k
	b.mu.Unlock()
}

// layer2MatMul is the number, within one forward of the tiny model, of the
// first MatMul of model.layers.2 (each layer runs seven).
const layer2MatMul = 2*7 + 1

// faultPrompt is the input of every forward of the fault tests.
var faultPrompt = []int32{12, 250, 3, 77}

// rig is the tiny model offloaded on a CPU compute device with fault
// injection, the reference logits of faultPrompt, and the device's memory
// before the engine took any.
type rig struct {
	t                 *testing.T
	f                 *fixture
	in                *injector
	kern              *faultyBackend // strict kernels on the compute device
	cache             *llama.KVCache
	want              []float32
	origs             map[*nn.Parameter]*runtime.Tensor
	devBase, hostBase runtime.MemStats
	name              string
	cfg               offload.Config
}

// newRig loads the model in dir (the tiny model when ""), computes the
// reference on the compute device from the host weights (which also leaves
// the model's workspace there, part of the baseline), and prepares a
// configuration with two transfer blocks and room for one resident unit.
func newRig(t *testing.T, dir string) *rig {
	t.Helper()
	if dir == "" {
		dir = tinyDir
	}
	f := newFixture(t, dir, 0)
	r := &rig{t: t, f: f, in: inject(f.dev), name: uniqueName(t), origs: map[*nn.Parameter]*runtime.Tensor{}}
	plain, err := kernels.NewCPUBackend(f.dev)
	if err != nil {
		t.Fatal(err)
	}
	r.kern = &faultyBackend{Backend: strictBackend{plain, f.dev}}
	if r.cache, err = f.model.NewKVCache(plain, len(faultPrompt)); err != nil {
		t.Fatal(err)
	}
	if r.want, err = r.forwardWith(plain); err != nil {
		t.Fatal(err)
	}
	for _, p := range nn.Parameters(f.model) {
		r.origs[p] = p.Peek()
	}
	r.devBase, r.hostBase = f.dev.Memory(), f.dev.HostMemory()
	fp, err := offload.Measure(f.model, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.cfg = offload.DefaultConfig(f.dev)
	r.cfg.TransferBlocks = 2
	r.cfg.GPUBudget = offload.Budget{Bytes: fp.MinBudget(2) + fp.MaxUnitBytes}
	t.Cleanup(func() {
		if offload.GetOffloadManager(r.name).Phase() != offload.PhaseIdle {
			_ = offload.Release(r.name, true)
		}
		r.cache.Free()
	})
	return r
}

func (r *rig) forwardWith(b kernels.Backend) ([]float32, error) {
	r.cache.Reset()
	lt, err := r.f.model.Forward(b, r.cache, faultPrompt, false)
	if err != nil {
		return nil, err
	}
	out := make([]float32, lt.NumElements())
	return out, b.ReadF32(out, lt)
}

func (r *rig) forward() ([]float32, error) { return r.forwardWith(r.kern) }

func (r *rig) offload() {
	r.t.Helper()
	if err := offload.Offload(r.f.model, &r.cfg, r.name); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) phase() offload.Phase { return offload.GetOffloadManager(r.name).Phase() }

// good runs n forwards, each of which must compute the reference logits.
func (r *rig) good(n int) {
	r.t.Helper()
	for i := 0; i < n; i++ {
		got, err := r.forward()
		if err != nil {
			r.t.Fatalf("forward (%v): %v", r.phase(), err)
		}
		if !slices.Equal(got, r.want) {
			r.t.Fatalf("forward (%v) computed different logits from the reference", r.phase())
		}
		r.settled()
	}
}

// until runs good forwards until the manager is in phase p.
func (r *rig) until(p offload.Phase) {
	r.t.Helper()
	for i := 0; r.phase() != p; i++ {
		if i == 5 {
			r.t.Fatalf("still in %v after 5 forwards, want %v", r.phase(), p)
		}
		r.good(1)
	}
}

// bad runs one forward that must fail with target.
func (r *rig) bad(target error) error {
	r.t.Helper()
	_, err := r.forward()
	if !errors.Is(err, target) {
		r.t.Fatalf("forward (%v) = %v, want %v", r.phase(), err, target)
	}
	return err
}

// settled checks the engine between forwards: no forward or unit is marked
// as running and no transfer slot holds a unit that entered but did not exit.
func (r *rig) settled() {
	r.t.Helper()
	st := offload.PipelineStateOf(r.name)
	if st.InForward || st.Active != "" || st.Entered != st.Exited {
		r.t.Fatalf("engine between forwards: in forward %v, active unit %q, %d units entered and %d exited",
			st.InForward, st.Active, st.Entered, st.Exited)
	}
	for s, g := range st.SlotOcc {
		if g >= st.Issued {
			r.t.Fatalf("slot %d holds copy %d, but only %d were issued", s, g, st.Issued)
		}
	}
	if st.Issued-st.Exited > len(st.SlotOcc) {
		r.t.Fatalf("%d copies in flight for %d slots", st.Issued-st.Exited, len(st.SlotOcc))
	}
}

// idle checks that a failed pass left the pipeline drained: nothing issued,
// every slot free, no copy timing pending.
func (r *rig) idle() {
	r.t.Helper()
	st := offload.PipelineStateOf(r.name)
	if st.InForward || st.Active != "" || st.Issued != 0 || st.Entered != 0 || st.Exited != 0 || st.Pending != 0 {
		r.t.Fatalf("after a failed pass: %+v; want an idle pipeline", st)
	}
	for s, g := range st.SlotOcc {
		if g != -1 {
			r.t.Fatalf("after a failed pass slot %d still holds copy %d", s, g)
		}
	}
}

// restored checks that no engine memory is held and the model is bound to
// its own weights.
func (r *rig) restored() {
	r.t.Helper()
	if m := r.f.dev.Memory(); m.InUse != r.devBase.InUse || m.Count != r.devBase.Count {
		r.t.Errorf("device memory %d bytes in %d allocations, baseline %d in %d", m.InUse, m.Count, r.devBase.InUse, r.devBase.Count)
	}
	if h := r.f.dev.HostMemory(); h.InUse != r.hostBase.InUse || h.Count != r.hostBase.Count {
		r.t.Errorf("pinned memory %d bytes in %d allocations, baseline %d in %d", h.InUse, h.Count, r.hostBase.InUse, r.hostBase.Count)
	}
	for p, t := range r.origs {
		if p.Peek() != t {
			r.t.Fatalf("parameter %s is not bound to its own tensor", p.Name())
		}
	}
	if p := r.phase(); p != offload.PhaseIdle {
		r.t.Fatalf("manager in %v, want IDLE", p)
	}
}

// release releases with preserveModel, which must succeed and return every
// byte; the model then runs on its host weights again.
func (r *rig) release() {
	r.t.Helper()
	if err := offload.Release(r.name, true); err != nil {
		r.t.Fatalf("Release: %v", err)
	}
	r.restored()
	hb, _ := kernels.NewCPUBackend(r.f.host)
	hc, err := r.f.model.NewKVCache(hb, len(faultPrompt))
	if err != nil {
		r.t.Fatal(err)
	}
	defer hc.Free()
	lt, err := r.f.model.Forward(strictBackend{hb, r.f.host}, hc, faultPrompt, false)
	if err != nil {
		r.t.Fatalf("the released model does not run on its host weights: %v", err)
	}
	got := make([]float32, lt.NumElements())
	if err := hb.ReadF32(got, lt); err != nil || !slices.Equal(got, r.want) {
		r.t.Fatalf("the released model computes something else (%v)", err)
	}
}

// failedEngine checks a manager whose plan could not be built: forwards and
// UpdateState say ErrEngineFailed and name the cause; Failed names it too,
// without waiting for the manager's lock (a forward pass holds it); Release
// cleans up and clears Failed.
func (r *rig) failedEngine(cause error) {
	r.t.Helper()
	unlock := offload.HoldManagerLock(r.name)
	got := make(chan error, 1)
	go func() { got <- offload.GetOffloadManager(r.name).Failed() }()
	select {
	case err := <-got:
		unlock()
		if err == nil || !strings.Contains(err.Error(), cause.Error()) {
			r.t.Fatalf("Failed() = %v, want an error naming %q", err, cause)
		}
	case <-time.After(5 * time.Second):
		unlock()
		r.t.Fatal("Failed() waits for the manager's lock (held by a forward pass)")
	}
	if _, err := r.forward(); !errors.Is(err, offload.ErrEngineFailed) || !strings.Contains(err.Error(), cause.Error()) {
		r.t.Fatalf("forward on a failed engine = %v, want ErrEngineFailed naming %q", err, cause)
	}
	if err := offload.UpdateState(r.name, 0); !errors.Is(err, offload.ErrEngineFailed) {
		r.t.Fatalf("UpdateState on a failed engine = %v, want ErrEngineFailed", err)
	}
	if st := offload.PipelineStateOf(r.name); st.Failed == nil || st.InForward || st.Active != "" {
		r.t.Fatalf("failed engine state %+v", st)
	}
	r.release()
	if err := offload.GetOffloadManager(r.name).Failed(); err != nil {
		r.t.Fatalf("Failed() after Release = %v, want nil", err)
	}
}

// TestFaultCopy: a host-to-device copy fails in each phase. The forward
// returns the copy's error; the failed copy stream is replaced and the
// pipeline drained, so the next forwards compute the right logits; a copy
// failing while the plan is measured fails the engine clearly. Release
// always returns every byte.
func TestFaultCopy(t *testing.T) {
	t.Run("discovery", func(t *testing.T) {
		r := newRig(t, "")
		r.offload()
		r.in.failCopy(2) // the second unit's staging copy
		r.bad(errCopyFault)
		if p := r.phase(); p != offload.PhaseDiscovery {
			t.Fatalf("a failed discovery pass advanced the phase to %v", p)
		}
		r.until(offload.PhaseInference)
		r.good(2)
		r.release()
	})
	t.Run("profiling", func(t *testing.T) {
		r := newRig(t, "")
		r.offload()
		r.until(offload.PhaseProfiling)
		r.in.failCopy(3)
		r.bad(errCopyFault)
		if p := r.phase(); p != offload.PhaseProfiling {
			t.Fatalf("a failed profiling pass advanced the phase to %v", p)
		}
		r.until(offload.PhaseInference)
		r.good(2)
		r.release()
	})
	for _, timing := range []offload.TimingMode{offload.TimingOff, offload.TimingEager} {
		t.Run("inference/timing "+timing.String(), func(t *testing.T) {
			r := newRig(t, "")
			r.cfg.OffloadTiming = timing
			r.offload()
			r.until(offload.PhaseInference)
			if len(offload.OffloadUnits(r.name)) == 0 || len(offload.ResidentUnits(r.name)) == 0 {
				t.Fatalf("plan streams %d and keeps %d units; the test wants both kinds", len(offload.OffloadUnits(r.name)), len(offload.ResidentUnits(r.name)))
			}
			r.good(2)
			before, err := offload.GetGPUMemoryUsage(r.name)
			if err != nil {
				t.Fatal(err)
			}
			// The next copy to run may be a prefetch for the pass after
			// next: the failure shows in one of the next two forwards.
			r.in.failCopy(1)
			var failed error
			for i := 0; i < 3 && failed == nil; i++ {
				got, err := r.forward()
				switch {
				case err != nil:
					failed = err
				case !slices.Equal(got, r.want):
					t.Fatal("a forward before the failed copy computed different logits")
				}
			}
			if !errors.Is(failed, errCopyFault) {
				t.Fatalf("forwards after the failed copy: %v, want %v", failed, errCopyFault)
			}
			r.idle()
			if p := r.phase(); p != offload.PhaseInference {
				t.Fatalf("phase %v after a failed inference pass", p)
			}
			r.good(4)
			after, err := offload.GetGPUMemoryUsage(r.name)
			if err != nil || after != before {
				t.Fatalf("engine memory %+v after the failure, %+v before (%v)", after, before, err)
			}
			if timing == offload.TimingEager {
				rep, err := offload.CollectOffloadTiming(r.name)
				if err != nil || rep == nil || len(rep.Snapshots) < 4 {
					t.Fatalf("timing report after recovery: %+v, %v", rep, err)
				}
			}
			r.release()
		})
	}
	t.Run("plan measurement", func(t *testing.T) {
		r := newRig(t, "")
		r.offload()
		r.until(offload.PhaseProfiling)
		n := r.in.copiesRun()
		r.good(1)
		perPass := r.in.copiesRun() - n
		// The last profiling pass ends by timing copies for the plan: fail the first.
		r.in.failCopy(perPass + 1)
		r.bad(errCopyFault)
		r.failedEngine(errCopyFault)
	})
}

// TestFaultAlloc: a device allocation fails while the engine is being built
// (Offload), while the plan is placed (the last profiling pass), while a
// profile is adopted (OffloadFromProfile), and while discovery uploads a
// shared parameter. A failed Offload or OffloadFromProfile leaves nothing
// allocated and the model on its own weights, and a retry works; a failed
// plan fails the engine clearly and Release cleans up; a failed discovery
// pass is retried by the next forward.
func TestFaultAlloc(t *testing.T) {
	for _, label := range []string{"offload resident parameters", "offload staging block"} {
		t.Run("offload/"+label, func(t *testing.T) {
			r := newRig(t, "")
			r.in.failAlloc(label, 1)
			err := offload.Offload(r.f.model, &r.cfg, r.name)
			if !errors.Is(err, errAllocFault) || !strings.Contains(err.Error(), label) {
				t.Fatalf("Offload = %v, want the failed allocation of %q", err, label)
			}
			r.restored()
			r.offload()
			r.until(offload.PhaseInference)
			r.good(1)
			r.release()
		})
	}
	for _, c := range []struct {
		label string
		nth   int
	}{{"offload resident unit", 1}, {"offload transfer block", 2}} {
		t.Run(fmt.Sprintf("plan/%s %d", c.label, c.nth), func(t *testing.T) {
			r := newRig(t, "")
			r.offload()
			r.until(offload.PhaseProfiling)
			r.good(1)
			r.in.failAlloc(c.label, c.nth)
			err := r.bad(errAllocFault)
			if !strings.Contains(err.Error(), c.label) {
				t.Fatalf("error %v does not name %q", err, c.label)
			}
			r.failedEngine(errAllocFault)
		})
	}

	profile := func(t *testing.T) string {
		r := newRig(t, "")
		r.offload()
		r.until(offload.PhaseInference)
		dir := filepath.Join(t.TempDir(), "profile")
		if err := offload.SaveProfile(dir, r.name); err != nil {
			t.Fatal(err)
		}
		r.release()
		return dir
	}
	pdir := profile(t)
	for _, c := range []struct {
		label string
		nth   int
	}{{"offload resident parameters", 1}, {"offload resident unit", 1}, {"offload transfer block", 2}, {"copy", 3}} {
		t.Run(fmt.Sprintf("profile/%s %d", c.label, c.nth), func(t *testing.T) {
			r := newRig(t, "")
			want := errAllocFault
			if c.label == "copy" {
				r.in.failCopy(c.nth)
				want = errCopyFault
			} else {
				r.in.failAlloc(c.label, c.nth)
			}
			err := offload.OffloadFromProfile(r.f.model, pdir, &r.cfg, r.name)
			if !errors.Is(err, want) {
				t.Fatalf("OffloadFromProfile = %v, want %v", err, want)
			}
			r.restored()
			if err := offload.OffloadFromProfile(r.f.model, pdir, &r.cfg, r.name); err != nil {
				t.Fatal(err)
			}
			if len(offload.ResidentUnits(r.name)) == 0 || len(offload.OffloadUnits(r.name)) == 0 {
				t.Fatal("the profile's plan should keep some units and stream others")
			}
			r.good(3)
			r.release()
		})
	}

	t.Run("discovery/shared parameter", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "tied")
		cfg := llama.Shapes["deep-test"]
		cfg.TieWordEmbeddings = true
		if err := llama.MakeCheckpoint(dir, cfg, 5, 1<<20); err != nil {
			t.Fatal(err)
		}
		r := newRig(t, dir)
		r.cfg.Include = []string{"model.embed_tokens", "model.layers.*", "lm_head"}
		r.cfg.GPUBudget = offload.Budget{Bytes: 600 << 10}
		r.offload()
		r.in.failAlloc("offload shared parameter", 1)
		r.bad(errAllocFault)
		if p := r.phase(); p != offload.PhaseDiscovery {
			t.Fatalf("a failed discovery pass advanced the phase to %v", p)
		}
		r.until(offload.PhaseInference)
		r.good(2)
		r.release()
	})
}

// TestFaultCompute: a unit's compute fails once (one MatMul of layer 2) in
// each phase. The forward returns that error, the phase does not advance,
// the pipeline is drained, and the next forwards compute the right logits.
func TestFaultCompute(t *testing.T) {
	for _, p := range []offload.Phase{offload.PhaseDiscovery, offload.PhaseProfiling, offload.PhaseInference} {
		t.Run(p.String(), func(t *testing.T) {
			r := newRig(t, "")
			r.cfg.OffloadTiming = offload.TimingEager
			r.offload()
			r.until(p)
			if p == offload.PhaseInference {
				r.good(1)
			}
			r.kern.failMatMul(layer2MatMul)
			r.bad(errComputeFault)
			if got := r.phase(); got != p {
				t.Fatalf("a failed pass moved the phase from %v to %v", p, got)
			}
			r.idle()
			r.until(offload.PhaseInference)
			r.good(3)
			if p == offload.PhaseInference {
				rep, err := offload.CollectOffloadTiming(r.name)
				if err != nil || rep == nil {
					t.Fatalf("timing report: %v, %v", rep, err)
				}
				if len(rep.Snapshots) != 4 {
					t.Errorf("timing report has %d passes; want the 4 that succeeded", len(rep.Snapshots))
				}
			}
			r.release()
		})
	}
}
