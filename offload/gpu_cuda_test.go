//go:build cuda

package offload_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/models/llama"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// gpuFixture is the deep test model on the host and GPU 0 as the compute device.
type gpuFixture struct {
	host    *runtime.CPUDevice
	dev     *cuda.Device
	backend kernels.Backend
	model   *llama.Model
}

func newGPUFixture(t testing.TB, dir string) *gpuFixture {
	t.Helper()
	dev, err := cuda.Open(0)
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	b, err := cudabackend.New(dev)
	if err != nil {
		t.Fatal(err)
	}
	f := &gpuFixture{host: runtime.NewCPU(0), dev: dev, backend: b}
	m, ck, err := llama.Load(dir, f.host)
	if err != nil {
		t.Fatal(err)
	}
	f.model = m
	t.Cleanup(func() {
		m.Close()
		ck.Close()
		f.host.Close()
		dev.Close()
	})
	return f
}

// gpuDeepDir is the deep test model as the GPU tests use it (engine_test.go's
// deepDirFor a CUDA device). Offloaded == resident on the GPU is
// TestOffloadedEqualsResident's cuda:0 subtest.
func gpuDeepDir(t *testing.T) string { return deepDirFor(t, runtime.KindCUDA) }

func gpuUnitBytes(t *testing.T, m *llama.Model) offload.Footprint {
	fp, err := offload.Measure(m, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

// TestGPULeak: 100 offload/release cycles return every device and pinned
// byte.
func TestGPULeak(t *testing.T) {
	dir := gpuDeepDir(t)
	f := newGPUFixture(t, dir)
	fp := gpuUnitBytes(t, f.model)
	// One forward outside the engine would allocate the model's workspace on
	// the device; the cycles below allocate theirs through the same model,
	// so take the baseline after a first cycle.
	baseDev, baseHost := int64(-1), int64(-1)
	for cycle := 0; cycle < 100; cycle++ {
		cfg := offload.DefaultConfig(f.dev)
		cfg.TransferBlocks = 2 + cycle%3
		cfg.GPUBudget = offload.Budget{Bytes: fp.MinBudget(cfg.TransferBlocks) + int64(cycle%4)*fp.MaxUnitBytes}
		name := uniqueName(t)
		if err := offload.Offload(f.model, &cfg, name); err != nil {
			t.Fatal(err)
		}
		run(t, f.model, f.backend, []int32{1, 2, 3}, 3)
		if err := offload.Release(name, cycle%2 == 0); err != nil {
			t.Fatal(err)
		}
		if cycle%2 == 1 {
			// Without preserveModel the model is discarded: load it again.
			f.model.Close()
			m, ck, err := llama.Load(dir, f.host)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ck.Close() })
			f.model = m
		}
		d, h := f.dev.Memory().InUse, f.dev.HostMemory().InUse
		if baseDev < 0 {
			baseDev, baseHost = d, h
		}
		if d > baseDev || h != baseHost {
			t.Fatalf("cycle %d: device %d bytes (baseline %d), pinned %d (baseline %d)", cycle, d, baseDev, h, baseHost)
		}
	}
	t.Logf("100 cycles: device bytes %d, pinned %d at the end", f.dev.Memory().InUse, f.dev.HostMemory().InUse)
}

// TestGPUSoak: FT_SOAK (default 1000) offloaded decode steps, each equal to
// the first pass's logits from a fresh cache, memory flat.
func TestGPUSoak(t *testing.T) {
	n := 1000
	if s := os.Getenv("FT_SOAK"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	dir := gpuDeepDir(t)
	f := newGPUFixture(t, dir)
	fp := gpuUnitBytes(t, f.model)
	cfg := offload.DefaultConfig(f.dev)
	cfg.TransferBlocks = 2
	cfg.GPUBudget = offload.Budget{Bytes: fp.MinBudget(2) + 3*fp.MaxUnitBytes}
	name := uniqueName(t)
	if err := offload.Offload(f.model, &cfg, name); err != nil {
		t.Fatal(err)
	}
	defer offload.Release(name, true)
	prompt := []int32{7, 8, 9, 10}
	for i := 0; i < 3; i++ { // discovery, profiling
		run(t, f.model, f.backend, prompt, 0)
	}
	first := run(t, f.model, f.backend, prompt, 0)[0]
	d0, h0 := f.dev.Memory().InUse, f.dev.HostMemory().InUse
	for i := 0; i < n; i++ {
		got := run(t, f.model, f.backend, prompt, 0)[0]
		if !slices.Equal(got, first) {
			t.Fatalf("forward %d differs from the first", i)
		}
		if d, h := f.dev.Memory().InUse, f.dev.HostMemory().InUse; d != d0 || h != h0 {
			t.Fatalf("forward %d: device %d (was %d), pinned %d (was %d)", i, d, d0, h, h0)
		}
	}
	t.Logf("%d offloaded forwards identical; device %d bytes, pinned %d bytes throughout", n, d0, h0)
}

func graphOpts(f *gpuFixture) []offload.Option {
	return []offload.Option{offload.WithCompile(offload.GraphCompiler(f.dev.Name(), llama.UnitGraphs(f.backend)))}
}

// TestGPUUnitGraphs: with each layer replaying a graph of its own inside the
// engine's traps, offloaded decode computes exactly what the op-by-op
// offloaded decode does, every layer captured, and a replan (which moves
// weights) recaptures and still computes the same.
func TestGPUUnitGraphs(t *testing.T) {
	dir := gpuDeepDir(t)
	prompt := []int32{3, 1, 4, 1, 5}
	var outs [2][][]float32
	for k, graphs := range []bool{false, true} {
		f := newGPUFixture(t, dir)
		fp := gpuUnitBytes(t, f.model)
		cfg := offload.DefaultConfig(f.dev)
		cfg.TransferBlocks = 2
		cfg.GPUBudget = offload.Budget{Bytes: fp.MinBudget(2) + 4*fp.MaxUnitBytes}
		name := uniqueName(t)
		var opts []offload.Option
		if graphs {
			opts = graphOpts(f)
		}
		if err := offload.Offload(f.model, &cfg, name, opts...); err != nil {
			t.Fatal(err)
		}
		outs[k] = run(t, f.model, f.backend, prompt, 8)
		if graphs {
			for i, c := range f.model.GraphCaptures() {
				if c == 0 {
					t.Errorf("layer %d never captured a graph", i)
				}
			}
			n, err := offload.RequestStrategyReplan(name, false)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < n; i++ {
				run(t, f.model, f.backend, prompt, 0)
			}
			if s := offload.GetStrategyReplanStatus(name); s.State != offload.ReplanDone {
				t.Fatalf("replan under graphs: %+v", s)
			}
			again := run(t, f.model, f.backend, prompt, 8)
			for i := range again {
				if !slices.Equal(again[i], outs[k][i]) {
					t.Fatalf("after the replan, pass %d differs", i)
				}
			}
		}
		if err := offload.Release(name, true); err != nil {
			t.Fatal(err)
		}
		f.model.DropUnitGraphs()
	}
	for i := range outs[0] {
		if !slices.Equal(outs[0][i], outs[1][i]) {
			t.Fatalf("pass %d: graph replay differs from op-by-op", i)
		}
	}
}

// BenchmarkGPUUnitGraphsReplan: offloaded one-token forwards of the deep
// test model, op by op and with per-layer graphs, and with graphs again
// after a strategy replan; reports ms per forward.
func BenchmarkGPUUnitGraphsReplan(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "deep")
	cfg := llama.Shapes["deep-test"]
	cfg.HiddenSize, cfg.IntermediateSize, cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.HeadDim = 256, 768, 4, 2, 64
	if err := llama.MakeCheckpoint(dir, cfg, 11, 1<<30); err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"eager", "graphs", "graphs-after-replan"} {
		b.Run(mode, func(b *testing.B) {
			f := newGPUFixture(b, dir)
			fp, _ := offload.Measure(f.model, nil, nil)
			oc := offload.DefaultConfig(f.dev)
			oc.TransferBlocks = 2
			oc.GPUBudget = offload.Budget{Bytes: fp.MinBudget(2) + 4*fp.MaxUnitBytes}
			name := fmt.Sprintf("bench-%s-%d", mode, b.N)
			var opts []offload.Option
			if mode != "eager" {
				opts = graphOpts(f)
			}
			if err := offload.Offload(f.model, &oc, name, opts...); err != nil {
				b.Fatal(err)
			}
			defer offload.Release(name, true)
			cache, _ := f.model.NewKVCache(f.backend, 64+b.N+16)
			defer cache.Free()
			logits := make([]float32, f.model.Cfg.VocabSize)
			step := func(id int32) {
				lt, err := f.model.Forward(f.backend, cache, []int32{id}, false)
				if err != nil {
					b.Fatal(err)
				}
				if err := f.backend.ReadF32(logits, lt); err != nil {
					b.Fatal(err)
				}
			}
			for i := 0; i < 6; i++ { // discovery, profiling, warm
				step(int32(i))
			}
			if mode == "graphs-after-replan" {
				n, err := offload.RequestStrategyReplan(name, false)
				if err != nil {
					b.Fatal(err)
				}
				for i := 0; i < n+2; i++ {
					step(int32(i))
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				step(int32(i % 200))
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "ms/forward")
		})
	}
}

// BenchmarkGPUReplanUnderGraphs: one offloaded model with per-layer graphs;
// rounds of one-token forwards before a strategy replan and after it,
// alternating with no other work between. Reports the median round's ms per
// forward before and after (b.N forwards per round from an empty cache, 7
// rounds each).
func BenchmarkGPUReplanUnderGraphs(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "deep")
	cfg := llama.Shapes["deep-test"]
	cfg.HiddenSize, cfg.IntermediateSize, cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.HeadDim = 256, 768, 4, 2, 64
	if err := llama.MakeCheckpoint(dir, cfg, 11, 1<<30); err != nil {
		b.Fatal(err)
	}
	f := newGPUFixture(b, dir)
	fp, _ := offload.Measure(f.model, nil, nil)
	oc := offload.DefaultConfig(f.dev)
	oc.GPUBudget = offload.Budget{Bytes: fp.MinBudget(2) + 4*fp.MaxUnitBytes}
	name := fmt.Sprintf("bench-replan-%d", b.N)
	if err := offload.Offload(f.model, &oc, name, graphOpts(f)...); err != nil {
		b.Fatal(err)
	}
	defer offload.Release(name, true)
	cache, _ := f.model.NewKVCache(f.backend, 16+16*b.N+64)
	defer cache.Free()
	logits := make([]float32, f.model.Cfg.VocabSize)
	step := func(id int32) {
		if cache.Len() >= cache.Cap()-1 {
			cache.Reset()
		}
		lt, err := f.model.Forward(f.backend, cache, []int32{id}, false)
		if err != nil {
			b.Fatal(err)
		}
		if err := f.backend.ReadF32(logits, lt); err != nil {
			b.Fatal(err)
		}
	}
	round := func() float64 {
		cache.Reset() // every round at the same contexts
		start := time.Now()
		for i := 0; i < b.N; i++ {
			step(int32(i % 200))
		}
		return float64(time.Since(start).Microseconds()) / 1e3 / float64(b.N)
	}
	for i := 0; i < 6; i++ {
		step(int32(i))
	}
	var before, after []float64
	for r := 0; r < 7; r++ {
		before = append(before, round())
	}
	n, err := offload.RequestStrategyReplan(name, false)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n+2; i++ {
		step(int32(i))
	}
	st := offload.GetStrategyReplanStatus(name)
	if st.State != offload.ReplanDone {
		b.Fatalf("replan: %+v", st)
	}
	for r := 0; r < 7; r++ {
		after = append(after, round())
	}
	slices.Sort(before)
	slices.Sort(after)
	b.ReportMetric(before[3], "before_ms/forward")
	b.ReportMetric(after[3], "after_ms/forward")
	applied := 0.0
	if st.Applied != nil && *st.Applied {
		applied = 1
	}
	b.ReportMetric(applied, "replan_applied")
}
