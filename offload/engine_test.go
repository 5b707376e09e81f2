package offload_test

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/llama"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

const tinyDir = "../testdata/tiny-llama"

// strictBackend fails any op given a tensor of another device: an offloaded
// model that forgot to re-bind a parameter would read host memory, which the
// CPU kernels could otherwise do without complaint.
type strictBackend struct {
	kernels.Backend
	dev runtime.Device
}

func (s strictBackend) check(op string, ts ...*runtime.Tensor) error {
	for _, t := range ts {
		if t.Device() != s.dev {
			return fmt.Errorf("%s: tensor %v is on another device than the compute device", op, t)
		}
		if t.Buffer().Freed() {
			return fmt.Errorf("%s: tensor %v reads a freed buffer", op, t)
		}
	}
	return nil
}

func (s strictBackend) MatMul(out, x, w *runtime.Tensor) error {
	if err := s.check("MatMul", out, x, w); err != nil {
		return err
	}
	return s.Backend.MatMul(out, x, w)
}

func (s strictBackend) RMSNorm(out, x, w *runtime.Tensor, eps float32) error {
	if err := s.check("RMSNorm", out, x, w); err != nil {
		return err
	}
	return s.Backend.RMSNorm(out, x, w, eps)
}

func (s strictBackend) Embedding(out, table *runtime.Tensor, ids []int32) error {
	if err := s.check("Embedding", out, table); err != nil {
		return err
	}
	return s.Backend.Embedding(out, table, ids)
}

// fixture is a model loaded on a host device and a compute device with a
// memory limit, as the engine runs on a machine without a GPU.
type fixture struct {
	host, dev *runtime.CPUDevice
	model     *llama.Model
	backend   kernels.Backend
}

func newFixture(t *testing.T, dir string, limit int64) *fixture {
	t.Helper()
	f := &fixture{host: runtime.NewCPU(0), dev: runtime.NewCPU(limit)}
	m, ck, err := llama.Load(dir, f.host)
	if err != nil {
		t.Fatal(err)
	}
	b, err := kernels.NewCPUBackend(f.dev)
	if err != nil {
		t.Fatal(err)
	}
	f.model, f.backend = m, strictBackend{b, f.dev}
	t.Cleanup(func() {
		m.Close()
		ck.Close()
		if err := f.host.Close(); err != nil {
			t.Errorf("host device: %v", err)
		}
		if err := f.dev.Close(); err != nil {
			t.Errorf("compute device: %v", err)
		}
	})
	return f
}

// run does a prefill of prompt and greedy decode steps, returning every
// logit row.
var run = testmodel.Run

func residentReference(t *testing.T, dir string, prompt []int32, steps int) [][]float32 {
	t.Helper()
	dev := runtime.NewCPU(0)
	m, ck, err := llama.Load(dir, dev)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { m.Close(); ck.Close(); dev.Close() }()
	b, _ := kernels.NewCPUBackend(dev)
	return run(t, m, b, prompt, steps)
}

var managerSeq int
var managerMu sync.Mutex

func uniqueName(t *testing.T) string {
	managerMu.Lock()
	defer managerMu.Unlock()
	managerSeq++
	return fmt.Sprintf("%s-%d", t.Name(), managerSeq)
}

func deepDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "deep")
	if err := llama.MakeCheckpoint(dir, llama.Shapes["deep-test"], 3, 1<<20); err != nil {
		t.Fatal(err)
	}
	return dir
}

// deepDirFor is the deep test model for a device of kind k: deep-test's
// shapes on the CPU; on a GPU wider (hidden 256, head width 64, which its
// attention kernels take), so that its layers are worth streaming.
func deepDirFor(t *testing.T, k runtime.DeviceKind) string {
	t.Helper()
	if k == runtime.KindCPU {
		return deepDir(t)
	}
	dir := filepath.Join(t.TempDir(), "deep")
	cfg := llama.Shapes["deep-test"]
	cfg.HiddenSize, cfg.IntermediateSize, cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.HeadDim = 256, 768, 4, 2, 64
	if err := llama.MakeCheckpoint(dir, cfg, 11, 1<<30); err != nil {
		t.Fatal(err)
	}
	return dir
}

// hostModel loads dir on a fresh CPU host device, the weights' home when
// they are offloaded; a cleanup closes the model, the checkpoint and the
// host device (failing the test on a leak).
func hostModel(t *testing.T, dir string) (*llama.Model, *runtime.CPUDevice) {
	t.Helper()
	host := runtime.NewCPU(0)
	t.Cleanup(func() {
		if err := host.Close(); err != nil {
			t.Errorf("host device: %v", err)
		}
	})
	return testmodel.Load(t, llama.Load, dir, host), host
}

// residentOn runs the model loaded on d itself (no engine).
func residentOn(t *testing.T, d devtest.Device, dir string, prompt []int32, steps int) [][]float32 {
	t.Helper()
	m, ck, err := llama.Load(dir, d.Dev)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { m.Close(); ck.Close() }()
	return run(t, m, d.Backend, prompt, steps)
}

// TestOffloadedEqualsResident, on every device: every budget from the
// smallest feasible to "everything fits", slot counts 2–4, the tiny model
// and a deeper one: the logits with the weights streamed from the host
// equal those of the model resident on the device bit for bit (same
// kernels, same order), through discovery, profiling and inference passes.
// The engine stays within its budget, and the device's allocator agrees
// with GetGPUMemoryUsage byte for byte (measured from the device's bytes
// before Offload: a GPU is shared by the whole test binary).
func TestOffloadedEqualsResident(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		// On the CPU, the kernels would read host memory without complaint:
		// strictBackend refuses it. The CUDA kernels check devices themselves.
		compute := d.Backend
		if d.Kind() == runtime.KindCPU {
			compute = strictBackend{d.Backend, d.Dev}
		}
		for _, c := range []struct {
			name string
			dir  string
		}{{"tiny", tinyDir}, {"deep", deepDirFor(t, d.Kind())}} {
			t.Run(c.name, func(t *testing.T) {
				prompt := []int32{5, 17, 42, 99, 3, 64, 7}
				const steps = 6
				// The resident run also leaves the backend's own scratch
				// allocated at these sizes, before the baselines below.
				want := residentOn(t, d, c.dir, prompt, steps)
				// After Release(preserveModel) the host model computes the
				// CPU's logits.
				hostWant := residentReference(t, c.dir, prompt, 0)[0]
				probe, _ := hostModel(t, c.dir)
				fp, err := offload.Measure(probe, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				units := len(fp.UnitBytes)
				for _, slots := range []int{2, 3, 4} {
					budgets := []int64{fp.MinBudget(slots), fp.MinBudget(slots) + (fp.TotalBytes-fp.FixedBytes)/2, fp.TotalBytes}
					for bi, budget := range budgets {
						t.Run(fmt.Sprintf("slots%d-budget%d", slots, budget), func(t *testing.T) {
							model, host := hostModel(t, c.dir)
							base, hostBase := d.Dev.Memory().InUse, d.Dev.HostMemory().InUse
							name := uniqueName(t)
							cfg := offload.DefaultConfig(d.Dev)
							cfg.GPUBudget = offload.Budget{Bytes: budget}
							cfg.TransferBlocks = slots
							cfg.OffloadTiming = offload.TimingEager
							if err := offload.Offload(model, &cfg, name); err != nil {
								t.Fatal(err)
							}
							got := run(t, model, compute, prompt, steps)
							for i := range want {
								if !slices.Equal(got[i], want[i]) {
									t.Fatalf("pass %d: offloaded logits differ from resident ones by up to %.3g", i, devtest.MaxAbsDiff(got[i], want[i]))
								}
							}
							usage, err := offload.GetGPUMemoryUsage(name)
							if err != nil {
								t.Fatal(err)
							}
							if usage.TotalBytes > budget {
								t.Errorf("engine holds %d bytes, budget %d", usage.TotalBytes, budget)
							}
							if n := len(offload.ResidentUnits(name)); bi == 0 && slots < units && n != 0 {
								t.Errorf("the minimal budget for %d slots keeps %d of %d units resident", slots, n, units)
							}
							plan, _ := offload.GetOffloadManager(name).Plan()
							if got := len(offload.OffloadUnits(name)) + len(offload.ResidentUnits(name)); got != units {
								t.Errorf("%d units listed, want %d", got, units)
							}
							if plan.PeakBytes != usage.TotalBytes {
								t.Errorf("plan peak %d bytes, engine holds %d", plan.PeakBytes, usage.TotalBytes)
							}
							// The allocator agrees: everything the device took since
							// Offload is the engine's or the model's activations (the
							// KV cache is freed).
							if inUse := d.Dev.Memory().InUse - base - model.WorkspaceBytes(); inUse != usage.TotalBytes {
								t.Errorf("allocator took %d bytes besides activations, GetGPUMemoryUsage says %d", inUse, usage.TotalBytes)
							}
							rep, err := offload.CollectOffloadTiming(name)
							if err != nil || rep == nil {
								t.Fatalf("timing report: %v, %v", rep, err)
							}
							if len(rep.Traps) != units {
								t.Errorf("report has %d traps, want %d", len(rep.Traps), units)
							}
							if err := offload.Release(name, true); err != nil {
								t.Fatal(err)
							}
							// Released with preserveModel: the model runs on its own
							// weights, on the host.
							hb, err := kernels.NewCPUBackend(host)
							if err != nil {
								t.Fatal(err)
							}
							again := run(t, model, hb, prompt, 1)
							if !slices.Equal(again[0], hostWant) {
								t.Fatal("after Release(preserve) the model computes something else")
							}
							if h := d.Dev.HostMemory().InUse; h != hostBase {
								t.Errorf("pinned bytes after Release: %d, %d before Offload", h, hostBase)
							}
						})
					}
				}
			})
		}
	})
}

// TestBudgetTooSmall: a byte budget below the planner's floor is refused
// by Offload itself on a cpu device without a memory limit (whose room is
// unknown), with ErrBudget naming the budget, the floor and the unit that
// sizes it; the model is left unclaimed: the same manager name then
// offloads it at the floor, and the plan after profiling is made.
func TestBudgetTooSmall(t *testing.T) {
	f := newFixture(t, tinyDir, 0)
	name := uniqueName(t)
	cfg := offload.DefaultConfig(f.dev)
	cfg.GPUBudget = offload.Budget{Bytes: 64 << 10}
	err := offload.Offload(f.model, &cfg, name)
	if err == nil {
		offload.Release(name, true)
		t.Fatal("Offload with a 64 KiB budget succeeded")
	}
	if !errors.Is(err, offload.ErrBudget) || !strings.Contains(err.Error(), "budget 64.00 KiB is below the least any plan needs") ||
		!strings.Contains(err.Error(), `sized to the unit "model.layers.`) {
		t.Fatalf("error = %v; want ErrBudget naming the budget and the unit", err)
	}
	cache, _ := f.model.NewKVCache(f.backend, 8)
	defer cache.Free()
	fp, err := offload.Measure(f.model, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// One transfer block of the largest layer: the floor.
	cfg.GPUBudget = offload.Budget{Bytes: fp.FixedBytes + fp.MaxUnitBytes}
	if err := offload.Offload(f.model, &cfg, name); err != nil {
		t.Fatalf("Offload at the floor %d: %v", cfg.GPUBudget.Bytes, err)
	}
	defer offload.Release(name, true)
	for i := 0; i < 4; i++ {
		cache.Reset()
		if _, err := f.model.Forward(f.backend, cache, []int32{1, 2}, false); err != nil {
			t.Fatalf("forward %d at the floor: %v", i, err)
		}
	}
	if ph := offload.GetOffloadManager(name).Phase(); ph != offload.PhaseInference {
		t.Fatalf("phase after 4 forwards at the floor: %v; want INFERENCE", ph)
	}
}

func TestAPIMisuse(t *testing.T) {
	f := newFixture(t, tinyDir, 0)
	name := uniqueName(t)
	if _, err := offload.OffloadBlock("blk", name); !errors.Is(err, offload.ErrNotOffloaded) {
		t.Errorf("OffloadBlock before Offload = %v", err)
	}
	if err := offload.ResumeProfiling(name); !errors.Is(err, offload.ErrUnbalanced) {
		t.Errorf("unbalanced ResumeProfiling = %v", err)
	}
	cfg := offload.DefaultConfig(f.dev)
	if err := offload.Offload(f.model, &cfg, name); err != nil {
		t.Fatal(err)
	}
	if _, err := offload.GetGPUMemoryUsage(name); !errors.Is(err, offload.ErrNotInference) {
		t.Errorf("GetGPUMemoryUsage before INFERENCE = %v", err)
	}
	if err := offload.Offload(f.model, &cfg, name); !errors.Is(err, offload.ErrAlreadyOffload) {
		t.Errorf("Offload twice = %v", err)
	}
	if err := offload.Offload(f.model, &cfg, name+"-other"); !errors.Is(err, offload.ErrAlreadyOffload) || !strings.Contains(err.Error(), name) {
		t.Errorf("Offload by a second manager = %v", err)
	}
	if err := offload.Release(name, true); err != nil {
		t.Fatal(err)
	}
	if err := offload.Release(name, true); !errors.Is(err, offload.ErrNotOffloaded) || !strings.Contains(err.Error(), "twice") {
		t.Errorf("Release twice = %v", err)
	}
	bad := cfg
	bad.Include = []string{"decoder.blocks.*"}
	err := offload.Offload(f.model, &bad, name)
	if !errors.Is(err, offload.ErrNothingIncluded) || !strings.Contains(err.Error(), "decoder.blocks.*") {
		t.Errorf("include matching nothing = %v", err)
	}
	if m := f.dev.Memory(); m.InUse != 0 {
		t.Errorf("a refused Offload left %d device bytes", m.InUse)
	}
}

// TestProfilingSuspension: suspended passes record nothing and do not count.
func TestProfilingSuspension(t *testing.T) {
	f := newFixture(t, tinyDir, 0)
	name := uniqueName(t)
	cfg := offload.DefaultConfig(f.dev)
	cfg.ProfilingIters = 2
	if err := offload.Offload(f.model, &cfg, name); err != nil {
		t.Fatal(err)
	}
	defer offload.Release(name, true)
	mgr := offload.GetOffloadManager(name)
	fwd := func() {
		cache, _ := f.model.NewKVCache(f.backend, 4)
		defer cache.Free()
		if _, err := f.model.Forward(f.backend, cache, []int32{3, 4}, false); err != nil {
			t.Fatal(err)
		}
	}
	fwd() // discovery
	if p := mgr.Phase(); p != offload.PhaseProfiling {
		t.Fatalf("after one forward: %v", p)
	}
	offload.SuspendProfiling(name)
	resume := offload.PauseProfiling(name) // nests
	for i := 0; i < 3; i++ {
		fwd()
	}
	resume()
	fwd() // still suspended once: not counted
	if p := mgr.Phase(); p != offload.PhaseProfiling {
		t.Fatalf("suspended passes advanced the phase to %v", p)
	}
	if err := offload.ResumeProfiling(name); err != nil {
		t.Fatal(err)
	}
	fwd()
	fwd()
	if p := mgr.Phase(); p != offload.PhaseInference {
		t.Fatalf("after two recorded profiling passes: %v", p)
	}
	in, err := mgr.PlanInput()
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range in.Units {
		if !(u.ComputeSec > 0) || math.IsInf(u.ComputeSec, 0) {
			t.Errorf("unit %s: compute %v s", u.Name, u.ComputeSec)
		}
	}
	if len(in.Curve.Points) == 0 {
		t.Error("no H2D curve measured")
	}
}

// TestTiedAcrossUnits: with tied embeddings and the embedding and LM head as
// units of their own, discovery finds the head reading the embedding's
// weight and keeps it resident; results match the resident model.
func TestTiedAcrossUnits(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tied")
	cfg := llama.Shapes["deep-test"]
	cfg.TieWordEmbeddings = true
	if err := llama.MakeCheckpoint(dir, cfg, 5, 1<<20); err != nil {
		t.Fatal(err)
	}
	prompt := []int32{9, 8, 7}
	want := residentReference(t, dir, prompt, 3)
	f := newFixture(t, dir, 0)
	name := uniqueName(t)
	oc := offload.DefaultConfig(f.dev)
	oc.Include = []string{"model.embed_tokens", "model.layers.*", "lm_head"}
	oc.TransferBlocks = 2
	oc.GPUBudget = offload.Budget{Bytes: 600 << 10}
	if err := offload.Offload(f.model, &oc, name); err != nil {
		t.Fatal(err)
	}
	defer offload.Release(name, true)
	got := run(t, f.model, f.backend, prompt, 3)
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("pass %d differs", i)
		}
	}
	if !f.model.Embed.Weight.Peek().Buffer().Freed() && f.model.Embed.Weight.Peek().Device() != runtime.Device(f.dev) {
		t.Fatal("the shared embedding is not on the compute device")
	}
}

// TestConcurrentForwards: a manager may be used from any goroutine; forwards
// through one manager are serialised (a pass holds the manager from the
// root's entry to its exit), so concurrent forwards of a model whose forward
// keeps no shared scratch all compute the right answer, under -race.
func TestConcurrentForwards(t *testing.T) {
	host, gpu := runtime.NewCPU(0), runtime.NewCPU(0)
	tower, err := NewTower(host, 6, 32, 64, 9)
	if err != nil {
		t.Fatal(err)
	}
	hb, _ := kernels.NewCPUBackend(host)
	gb, _ := kernels.NewCPUBackend(gpu)
	x, _ := runtime.NewTensor(host, runtime.F32, runtime.Shape{2, 32}, "x")
	for i := range x.F32() {
		x.F32()[i] = float32(i%5) - 2
	}
	want, _ := tower.Forward(hb, x)
	name := uniqueName(t)
	cfg := offload.DefaultConfig(gpu)
	cfg.Include = []string{"blocks.*"}
	cfg.GPUBudget = offload.Budget{Bytes: 3*24576 + 256}
	cfg.TransferBlocks = 2
	if err := offload.Offload(tower, &cfg, name); err != nil {
		t.Fatal(err)
	}
	xs, _ := runtime.NewTensor(gpu, runtime.F32, runtime.Shape{2, 32}, "x")
	copy(xs.F32(), x.F32())
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5; i++ {
				out, err := tower.Forward(gb, xs)
				if err != nil {
					errs <- err
					return
				}
				if !slices.Equal(out.F32(), want.F32()) {
					errs <- errors.New("concurrent forward computed different values")
				}
				out.Buffer().Free()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if p := offload.GetOffloadManager(name).Phase(); p != offload.PhaseInference {
		t.Errorf("after 20 forwards: phase %v", p)
	}
	if err := offload.Release(name, true); err != nil {
		t.Fatal(err)
	}
	xs.Buffer().Free()
	want.Buffer().Free()
	if m := gpu.Memory(); m.InUse != 0 {
		t.Errorf("device bytes after release: %d", m.InUse)
	}
}
