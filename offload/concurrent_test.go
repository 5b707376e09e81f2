package offload_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/llama"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// runLogits is run without testing.T, for goroutines: a prefill of prompt
// and steps greedy decode steps, every logit row.
var runLogits = testmodel.Greedy

// TestConcurrentManagers: two named managers offload two different models
// (the tiny model and a deeper one) onto one compute device and drive them
// from two goroutines at once, each through all three phases, under -race.
// Each goroutine gets its manager itself. Every pass equals its model's
// resident reference; afterwards the device holds nothing.
func TestConcurrentManagers(t *testing.T) {
	prompt := []int32{4, 99, 23, 7, 200}
	const steps, rounds = 3, 3
	host, dev := runtime.NewCPU(0), runtime.NewCPU(0)
	type job struct {
		dir   string
		model *llama.Model
		want  [][]float32
		cfg   offload.Config
	}
	var jobs []*job
	for i, dir := range []string{tinyDir, deepDir(t)} {
		m, ck, err := llama.Load(dir, host)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { m.Close(); ck.Close() }()
		fp, err := offload.Measure(m, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg := offload.DefaultConfig(dev)
		cfg.TransferBlocks = 2 + i
		cfg.GPUBudget = offload.Budget{Bytes: fp.MinBudget(2+i) + int64(i)*fp.MaxUnitBytes}
		if i == 1 {
			cfg.OffloadTiming = offload.TimingEager
		}
		jobs = append(jobs, &job{dir: dir, model: m, want: residentReference(t, dir, prompt, steps), cfg: cfg})
	}
	name := uniqueName(t)
	var wg sync.WaitGroup
	errs := make(chan error, len(jobs))
	start := make(chan struct{})
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mname := fmt.Sprintf("%s-model%d", name, i)
			fail := func(err error) { errs <- fmt.Errorf("manager %s: %w", mname, err) }
			b, err := kernels.NewCPUBackend(dev)
			if err != nil {
				fail(err)
				return
			}
			<-start
			if err := offload.Offload(j.model, &j.cfg, mname); err != nil {
				fail(err)
				return
			}
			mgr := offload.GetOffloadManager(mname)
			for r := 0; r < rounds; r++ {
				got, err := runLogits(j.model, strictBackend{b, dev}, prompt, steps)
				if err != nil {
					fail(err)
					return
				}
				for k := range j.want {
					if !slices.Equal(got[k], j.want[k]) {
						fail(fmt.Errorf("round %d pass %d (%v) differs from the resident reference", r, k, mgr.Phase()))
						return
					}
				}
			}
			if p := mgr.Phase(); p != offload.PhaseInference {
				fail(fmt.Errorf("phase %v after %d forwards", p, rounds*(steps+1)))
			}
			if _, err := mgr.GPUMemoryUsage(); err != nil {
				fail(err)
			}
			if err := offload.Release(mname, true); err != nil {
				fail(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, j := range jobs {
		j.model.Close() // frees its workspace on the compute device
	}
	if err := dev.Close(); err != nil { // reports any device or pinned byte still held
		t.Error(err)
	}
}

// towerRig is the custom Tower model offloaded with two transfer blocks
// for six blocks (half resident), eager timing, and its resident output.
type towerRig struct {
	tower   *Tower
	gpu     *runtime.CPUDevice
	xs      *runtime.Tensor
	want    []float32
	name    string
	release func()
}

func newTowerRig(t *testing.T) *towerRig {
	t.Helper()
	host, gpu := runtime.NewCPU(0), runtime.NewCPU(0)
	tower, err := NewTower(host, 6, 32, 64, 9)
	if err != nil {
		t.Fatal(err)
	}
	hb, _ := kernels.NewCPUBackend(host)
	x, _ := runtime.NewTensor(host, runtime.F32, runtime.Shape{2, 32}, "x")
	for i := range x.F32() {
		x.F32()[i] = float32(i%5) - 2
	}
	want, err := tower.Forward(hb, x)
	if err != nil {
		t.Fatal(err)
	}
	r := &towerRig{tower: tower, gpu: gpu, want: slices.Clone(want.F32()), name: uniqueName(t)}
	cfg := offload.DefaultConfig(gpu)
	cfg.Include = []string{"blocks.*"}
	cfg.GPUBudget = offload.Budget{Bytes: 5*24576 + 256}
	cfg.TransferBlocks = 2
	cfg.OffloadTiming = offload.TimingEager
	if err := offload.Offload(tower, &cfg, r.name); err != nil {
		t.Fatal(err)
	}
	r.xs, _ = runtime.NewTensor(gpu, runtime.F32, runtime.Shape{2, 32}, "x")
	copy(r.xs.F32(), x.F32())
	t.Cleanup(func() {
		if offload.GetOffloadManager(r.name).Phase() != offload.PhaseIdle {
			if err := offload.Release(r.name, true); err != nil {
				t.Error(err)
			}
		}
		r.xs.Buffer().Free()
		if m := gpu.Memory(); m.InUse != 0 {
			t.Errorf("device bytes after release: %d", m.InUse)
		}
		if h := gpu.HostMemory(); h.InUse != 0 {
			t.Errorf("pinned bytes after release: %d", h.InUse)
		}
	})
	return r
}

// forward runs the tower once on b and checks the output.
func (r *towerRig) forward(b kernels.Backend) error {
	out, err := r.tower.Forward(b, r.xs)
	if err != nil {
		return err
	}
	defer out.Buffer().Free()
	if !slices.Equal(out.F32(), r.want) {
		return errors.New("offloaded tower computed different values")
	}
	return nil
}

// TestConcurrentManagerCalls: while three goroutines run forwards of one
// offloaded model through one manager, a fourth calls every query and
// control of that manager in a loop. Under -race nothing races, every
// forward is right, suspensions stay balanced, and the manager reaches
// INFERENCE once profiling is no longer suspended.
func TestConcurrentManagerCalls(t *testing.T) {
	r := newTowerRig(t)
	mgr := offload.GetOffloadManager(r.name)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	var running atomic.Int32
	for g := 0; g < 3; g++ {
		wg.Add(1)
		running.Add(1)
		go func() {
			defer wg.Done()
			defer running.Add(-1)
			b, _ := kernels.NewCPUBackend(r.gpu)
			for i := 0; i < 6; i++ {
				if err := r.forward(b); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for calls := 0; running.Load() > 0 || calls < 20; calls++ {
			_ = mgr.Phase()
			if _, err := mgr.GPUMemoryUsage(); err != nil && !errors.Is(err, offload.ErrNotInference) {
				errs <- err
			}
			if _, err := mgr.CollectOffloadTiming(); err != nil {
				errs <- err
			}
			offload.SuspendProfiling(r.name)
			_ = offload.OffloadUnits(r.name)
			_ = offload.ResidentUnits(r.name)
			_, _ = mgr.Plan()
			_, _ = mgr.State()
			if err := offload.ResumeProfiling(r.name); err != nil {
				errs <- err
			}
			offload.PauseProfiling(r.name)()
			offload.ResetOffloadTiming(r.name)
			_ = mgr.Config()
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := offload.ResumeProfiling(r.name); !errors.Is(err, offload.ErrUnbalanced) {
		t.Errorf("suspensions left outstanding after balanced calls: %v", err)
	}
	b, _ := kernels.NewCPUBackend(r.gpu)
	for i := 0; i < 4 && mgr.Phase() != offload.PhaseInference; i++ {
		if err := r.forward(b); err != nil {
			t.Fatal(err)
		}
	}
	if p := mgr.Phase(); p != offload.PhaseInference {
		t.Fatalf("phase %v after concurrent forwards and 4 more", p)
	}
}

// gateBackend holds a forward inside a unit: the chosen MatMul call waits
// until resume is closed.
type gateBackend struct {
	kernels.Backend
	mu     sync.Mutex
	calls  int
	holdAt int
	held   chan struct{} // closed when the forward is being held
	resume chan struct{}
}

func (g *gateBackend) MatMul(out, x, w *runtime.Tensor) error {
	g.mu.Lock()
	g.calls++
	hold := g.calls == g.holdAt
	g.mu.Unlock()
	if hold {
		close(g.held)
		<-g.resume
	}
	return g.Backend.MatMul(out, x, w)
}

// arm holds the k-th MatMul from now.
func (g *gateBackend) arm(k int) {
	g.mu.Lock()
	g.holdAt = g.calls + k
	g.held, g.resume = make(chan struct{}), make(chan struct{})
	g.mu.Unlock()
}

// TestManagerCallsWaitForForward: the manager's calls are serialised with
// forwards, as the package documents: a call made from another goroutine
// while a forward is inside a unit returns only after that forward has
// left its root module, and then with a consistent answer. Release waits
// the same way, then restores the model.
func TestManagerCallsWaitForForward(t *testing.T) {
	r := newTowerRig(t)
	plain, _ := kernels.NewCPUBackend(r.gpu)
	gate := &gateBackend{Backend: plain}
	for offload.GetOffloadManager(r.name).Phase() != offload.PhaseInference {
		if err := r.forward(plain); err != nil {
			t.Fatal(err)
		}
	}
	mgr := offload.GetOffloadManager(r.name)
	usage, err := mgr.GPUMemoryUsage()
	if err != nil {
		t.Fatal(err)
	}
	pdir := filepath.Join(t.TempDir(), "profile")
	calls := []struct {
		name string
		call func() error
	}{
		{"Phase", func() error {
			if p := mgr.Phase(); p != offload.PhaseInference {
				return fmt.Errorf("phase %v", p)
			}
			return nil
		}},
		{"GPUMemoryUsage", func() error {
			u, err := mgr.GPUMemoryUsage()
			if err == nil && u != usage {
				err = fmt.Errorf("usage %+v, before %+v", u, usage)
			}
			return err
		}},
		{"CollectOffloadTiming", func() error {
			rep, err := mgr.CollectOffloadTiming()
			if err == nil && (rep == nil || len(rep.Snapshots) == 0) {
				err = errors.New("no measured pass")
			}
			return err
		}},
		{"ResetOffloadTiming", func() error { mgr.ResetOffloadTiming(); return nil }},
		{"SuspendProfiling", func() error { mgr.SuspendProfiling(); return mgr.ResumeProfiling() }},
		{"ClearProfilingDurations", func() error { mgr.ClearProfilingDurations(); return nil }},
		{"OffloadUnits", func() error {
			if n := len(mgr.OffloadUnits()) + len(mgr.ResidentUnits()); n != 6 {
				return fmt.Errorf("%d units listed", n)
			}
			return nil
		}},
		{"SaveProfile", func() error { return mgr.SaveProfile(pdir) }},
		{"SetConfig", func() error {
			if err := mgr.SetConfig(offload.DefaultConfig(r.gpu)); err == nil {
				return errors.New("SetConfig while offloaded succeeded")
			}
			return nil
		}},
		{"Release", func() error { return mgr.Release(true) }},
	}
	for _, c := range calls {
		gate.arm(4) // the first MatMul of blocks.1
		fwd := make(chan error, 1)
		go func() { fwd <- r.forward(gate) }()
		<-gate.held
		var returned atomic.Bool
		done := make(chan error, 1)
		go func() {
			err := c.call()
			returned.Store(true)
			done <- err
		}()
		time.Sleep(20 * time.Millisecond)
		if returned.Load() {
			t.Errorf("%s returned while a forward was inside a unit", c.name)
		}
		close(gate.resume)
		if err := <-fwd; err != nil {
			t.Fatalf("forward held during %s: %v", c.name, err)
		}
		if err := <-done; err != nil {
			t.Errorf("%s after the forward: %v", c.name, err)
		}
	}
	if p := mgr.Phase(); p != offload.PhaseIdle {
		t.Fatalf("after Release: %v", p)
	}
	// Released with preserveModel: the tower runs on its host weights.
	if err := r.forward(plain); err != nil {
		t.Fatal(err)
	}
}

// TestLastPassDuringForward: LastPass does not wait for a forward in
// flight (the engine holds the manager's lock for the whole forward): it
// returns the pass finished before at once, and the held forward's own
// pass once it ends; after Release it reports none.
func TestLastPassDuringForward(t *testing.T) {
	r := newTowerRig(t)
	plain, _ := kernels.NewCPUBackend(r.gpu)
	gate := &gateBackend{Backend: plain}
	mgr := offload.GetOffloadManager(r.name)
	for mgr.Phase() != offload.PhaseInference {
		if err := r.forward(plain); err != nil {
			t.Fatal(err)
		}
	}
	before := mgr.LastPass()
	if before.Seq == 0 {
		t.Fatal("no pass recorded after the forwards")
	}
	gate.arm(4)
	fwd := make(chan error, 1)
	go func() { fwd <- r.forward(gate) }()
	<-gate.held
	got := make(chan offload.PassInfo, 1)
	go func() { got <- mgr.LastPass() }()
	select {
	case p := <-got:
		if p.Seq != before.Seq {
			t.Errorf("during the forward: pass %d, want the previous one, %d", p.Seq, before.Seq)
		}
	case <-time.After(5 * time.Second):
		t.Error("LastPass waited for the forward in flight")
	}
	close(gate.resume)
	if err := <-fwd; err != nil {
		t.Fatal(err)
	}
	if p := mgr.LastPass(); p.Seq != before.Seq+1 {
		t.Errorf("after the forward: pass %d, want %d", p.Seq, before.Seq+1)
	}
	if err := mgr.Release(true); err != nil {
		t.Fatal(err)
	}
	if p := mgr.LastPass(); p.Seq != 0 {
		t.Errorf("after Release: pass %d, want none", p.Seq)
	}
}
