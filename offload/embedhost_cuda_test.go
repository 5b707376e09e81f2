//go:build cuda

package offload_test

import (
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/models/llama"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// gpuWideVocabDir is the GPU deep test model (hidden 256, 12 layers of
// ~1.6 MB) with a 32768-token vocabulary: a 16 MiB embedding table worth
// ~10 layers, as Llama 3's is worth two and a half.
func gpuWideVocabDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "widegpu")
	cfg := llama.Shapes["deep-test"]
	cfg.HiddenSize, cfg.IntermediateSize, cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.HeadDim = 256, 768, 4, 2, 64
	cfg.VocabSize = 32768
	if err := llama.MakeCheckpoint(dir, cfg, 13, 1<<30); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestGPUEmbedHost: an offloaded model on GPU 0 with its embedding table in
// device-mapped host memory (FT_EMBED_HOST on) computes, eager and with
// per-layer graphs, the same greedy tokens and logits bit for bit as with
// the table on the device (FT_EMBED_HOST=0) and as the model resident on
// the GPU; more layers stay resident with the table off the device; the
// table's bytes are pinned host bytes, not device bytes. ~10-20 s.
func TestGPUEmbedHost(t *testing.T) {
	dir := gpuWideVocabDir(t)
	prompt := []int32{3, 30000, 4, 1, 5, 17000}
	const steps = 8
	var want [][]float32
	{
		f := newGPUFixture(t, dir)
		m, ck, err := llama.Load(dir, f.dev)
		if err != nil {
			t.Fatal(err)
		}
		want = run(t, m, f.backend, prompt, steps)
		m.Close()
		ck.Close()
	}
	type result struct {
		outs     [][]float32
		resident int
		mapped   []string
		usage    offload.GPUMemoryUsage
	}
	do := func(on, graphs bool) result {
		defer offload.SetEmbedHost(on)()
		f := newGPUFixture(t, dir)
		fp := gpuUnitBytes(t, f.model)
		cfg := offload.DefaultConfig(f.dev)
		cfg.TransferBlocks = 2
		cfg.GPUBudget = offload.Budget{Bytes: fp.FixedBytes + 2*fp.MaxUnitBytes + fp.MaxUnitBytes/2} // no layer resident with the table on the device
		name := uniqueName(t)
		var opts []offload.Option
		if graphs {
			opts = graphOpts(f)
		}
		h0 := f.dev.HostMemory().InUse
		if err := offload.Offload(f.model, &cfg, name, opts...); err != nil {
			t.Fatal(err)
		}
		var r result
		t0 := time.Now()
		r.outs = run(t, f.model, f.backend, prompt, steps)
		wall := time.Since(t0)
		r.resident, r.mapped = len(offload.ResidentUnits(name)), offload.HostMappedParams(name)
		var err error
		if r.usage, err = offload.GetGPUMemoryUsage(name); err != nil {
			t.Fatal(err)
		}
		if r.usage.TotalBytes > cfg.GPUBudget.Bytes {
			t.Errorf("engine holds %d device bytes, budget %d", r.usage.TotalBytes, cfg.GPUBudget.Bytes)
		}
		if on && f.dev.HostMemory().InUse-h0 < r.usage.HostMappedBytes {
			t.Errorf("pinned host bytes grew by %d, less than the mapped table's %d", f.dev.HostMemory().InUse-h0, r.usage.HostMappedBytes)
		}
		t.Logf("FT_EMBED_HOST=%v graphs=%v: %d of %d layers resident, mapped %q (%d bytes), device %d bytes; %d forwards in %v",
			on, graphs, r.resident, len(fp.UnitBytes), r.mapped, r.usage.HostMappedBytes, r.usage.TotalBytes, steps+1, wall)
		hHeld := f.dev.HostMemory().InUse
		if err := offload.Release(name, true); err != nil {
			t.Fatal(err)
		}
		if drop := hHeld - f.dev.HostMemory().InUse; drop < r.usage.HostMappedBytes {
			t.Errorf("Release gave back %d pinned bytes, less than the mapped table's %d", drop, r.usage.HostMappedBytes)
		}
		f.model.DropUnitGraphs()
		return r
	}
	off := do(false, false)
	for _, graphs := range []bool{false, true} {
		on := do(true, graphs)
		if len(on.mapped) != 1 || on.usage.HostMappedBytes != 32768*256*2 {
			t.Fatalf("graphs=%v: the table did not go to mapped host memory: %q, %d bytes", graphs, on.mapped, on.usage.HostMappedBytes)
		}
		if on.resident <= off.resident {
			t.Errorf("graphs=%v: %d layers resident with the table on the host, %d with it on the device", graphs, on.resident, off.resident)
		}
		for i := range want {
			if !slices.Equal(on.outs[i], want[i]) || !slices.Equal(off.outs[i], want[i]) {
				t.Fatalf("graphs=%v pass %d: logits differ (host table vs resident %.3g, device table vs resident %.3g)",
					graphs, i, maxAbs(on.outs[i], want[i]), maxAbs(off.outs[i], want[i]))
			}
		}
	}
}

// TestGPUEmbedMappedGraph: the resident model's whole decode step captured
// as a CUDA graph reads the token id from device memory and the table row
// through the mapped address: with the table rebound to device-mapped host
// memory the replayed steps give the same logits bit for bit as with it in
// device memory. ~5 s.
func TestGPUEmbedMappedGraph(t *testing.T) {
	dir := gpuWideVocabDir(t)
	dev, err := cuda.Open(0)
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	defer dev.Close()
	b, err := cudabackend.New(dev)
	if err != nil {
		t.Fatal(err)
	}
	m, ck, err := llama.Load(dir, dev)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { m.Close(); ck.Close() }()
	prompt := []int32{3, 30000, 4, 1, 5, 17000}
	steps := func() [][]float32 {
		cache, err := m.NewKVCache(b, 32)
		if err != nil {
			t.Fatal(err)
		}
		defer cache.Free()
		lt, err := m.Forward(b, cache, prompt, false)
		if err != nil {
			t.Fatal(err)
		}
		v, err := testmodel.ReadLogits(b, lt)
		if err != nil {
			t.Fatal(err)
		}
		g, err := m.CaptureDecode(b, cache)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		out := [][]float32{v}
		for range 8 {
			if lt, err = g.Step(testmodel.Argmax(0, v)); err != nil {
				t.Fatal(err)
			}
			if v, err = testmodel.ReadLogits(b, lt); err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
		return out
	}
	want := steps()
	onDev := m.Embed.Weight.Peek()
	buf, host, err := dev.AllocMapped(onDev.NumBytes(), "test mapped table")
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	hb, err := dev.AllocHost(onDev.NumBytes(), "test readback")
	if err != nil {
		t.Fatal(err)
	}
	defer hb.Free()
	if err := dev.Compute().CopyD2H(hb, 0, onDev.Buffer(), onDev.Offset(), onDev.NumBytes()); err != nil {
		t.Fatal(err)
	}
	if err := dev.Compute().Synchronize(); err != nil {
		t.Fatal(err)
	}
	copy(host, hb.Bytes())
	mapped, err := runtime.TensorOn(buf, 0, onDev.DType(), onDev.Shape())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Embed.Weight.Bind(mapped); err != nil {
		t.Fatal(err)
	}
	got := steps()
	if err := m.Embed.Weight.Bind(onDev); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("step %d: the graph with the mapped table differs by %.3g", i, maxAbs(got[i], want[i]))
		}
	}
}

// TestGPUEmbedMappedRate: the embedding gather of T rows of a Llama-3-8B
// table (128256 x 4096 bf16, 1.05 GB) into the fp32 residual stream, from
// device memory and from device-mapped host memory, for T = 1, 16, 512 and
// 8192 random ids: microseconds a gather (wall, after synchronising, eager
// ids upload included) and the mapped gather's bus rate. The figures say
// what the host table costs decode (T=1) and prefill (T=512, 8192). ~10 s.
func TestGPUEmbedMappedRate(t *testing.T) {
	dev, err := cuda.Open(0)
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	defer dev.Close()
	b, err := cudabackend.New(dev)
	if err != nil {
		t.Fatal(err)
	}
	const vocab, dim = 128256, 4096
	n := int64(vocab * dim * 2)
	dbuf, err := dev.Alloc(n, "test device table")
	if err != nil {
		t.Fatal(err)
	}
	defer dbuf.Free()
	mbuf, host, err := dev.AllocMapped(n, "test mapped table")
	if err != nil {
		t.Fatal(err)
	}
	defer mbuf.Free()
	for i := range host {
		host[i] = byte(i*7) & 0x3f // finite bf16 values
	}
	stage, err := dev.AllocHost(64<<20, "test stage")
	if err != nil {
		t.Fatal(err)
	}
	for off := int64(0); off < n; off += stage.Size() {
		k := min(stage.Size(), n-off)
		copy(stage.Bytes(), host[off:off+k])
		if err := dev.Compute().CopyH2D(dbuf, off, stage, 0, k); err != nil {
			t.Fatal(err)
		}
		if err := dev.Compute().Synchronize(); err != nil {
			t.Fatal(err)
		}
	}
	stage.Free()
	dt, _ := runtime.TensorOn(dbuf, 0, runtime.BF16, runtime.Shape{vocab, dim})
	mt, _ := runtime.TensorOn(mbuf, 0, runtime.BF16, runtime.Shape{vocab, dim})
	rng := rand.New(rand.NewPCG(1, 2))
	for _, T := range []int{1, 16, 512, 8192} {
		ids := make([]int32, T)
		for i := range ids {
			ids[i] = int32(rng.IntN(vocab))
		}
		obuf, err := dev.Alloc(int64(T*dim*4), "test out")
		if err != nil {
			t.Fatal(err)
		}
		out, _ := runtime.TensorOn(obuf, 0, runtime.F32, runtime.Shape{T, dim})
		var us [2]float64
		var rows [2][]float32
		for k, table := range []*runtime.Tensor{dt, mt} {
			reps := max(3, min(50, 4096/T))
			best := time.Duration(1 << 62)
			for r := 0; r < reps+1; r++ {
				t0 := time.Now()
				if err := b.Embedding(out, table, ids); err != nil {
					t.Fatal(err)
				}
				if err := dev.Compute().Synchronize(); err != nil {
					t.Fatal(err)
				}
				if r > 0 {
					best = min(best, time.Since(t0))
				}
			}
			us[k] = float64(best.Nanoseconds()) / 1e3
			v, err := testmodel.ReadLogits(b, out)
			if err != nil {
				t.Fatal(err)
			}
			rows[k] = v
		}
		obuf.Free()
		if !slices.Equal(rows[0], rows[1]) {
			t.Fatalf("T=%d: the mapped gather differs from the device gather", T)
		}
		bytes := float64(T * dim * 2)
		t.Logf("T=%5d: device table %8.1f us, mapped host table %8.1f us (%.1f GB/s over the bus; +%.1f us)",
			T, us[0], us[1], bytes/us[1]/1e3, us[1]-us[0])
	}
}
