package decoder

import (
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/host"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// newHostLayerBench is NewHostLayerBench on a fresh CPU device and host
// backend of threads threads, at the scale FT_HOSTLAYER_SCALE (1 unless
// set: the Llama-3-8B shape; 4 divides the widths by 4, 27 MB, where per-job
// costs weigh about as they do at 16 threads on the full shape).
func newHostLayerBench(b *testing.B, threads, ctx int) *HostLayerBench {
	s := 1
	if v := os.Getenv("FT_HOSTLAYER_SCALE"); v != "" {
		var err error
		if s, err = strconv.Atoi(v); err != nil || s <= 0 {
			b.Fatalf("FT_HOSTLAYER_SCALE=%q: want a positive integer", v)
		}
	}
	dev := runtime.NewCPU(0)
	b.Cleanup(func() { dev.Close() })
	hb, err := host.New(dev, host.Options{Threads: threads})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { hb.Close() })
	h, err := NewHostLayerBench(hb, s, ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(h.Close)
	return h
}

func hostBenchThreads() int {
	if v := os.Getenv("FT_HOSTLAYER_THREADS"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	return 2
}

// benchHostStep times step on the host layer bench, reporting the weights'
// GB/s.
func benchHostStep(b *testing.B, step func(h *HostLayerBench) error) {
	h := newHostLayerBench(b, hostBenchThreads(), 512)
	if err := step(h); err != nil {
		b.Fatal(err)
	}
	bytes := h.WeightBytes()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := step(h); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(bytes)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

// BenchmarkHostLayer times one host-placed Llama-3-8B-shape layer at batch
// 1, context 512, on the host backend (2 threads unless
// FT_HOSTLAYER_THREADS) as the decoder runs it (one op unless
// FT_HOST_LAYER=0), reporting the weights' GB/s.
func BenchmarkHostLayer(b *testing.B) { benchHostStep(b, (*HostLayerBench).Step) }

// BenchmarkHostLayerSeparate times the same layer's separate ops.
func BenchmarkHostLayerSeparate(b *testing.B) { benchHostStep(b, (*HostLayerBench).StepSeparate) }

// BenchmarkHostLayerGEMVs times the same layer's GEMVs alone (fused q/k/v,
// o, fused gate·up, down, as the layer issues them less the SiLU): the
// floor BenchmarkHostLayer is measured against.
func BenchmarkHostLayerGEMVs(b *testing.B) { benchHostStep(b, (*HostLayerBench).StepGEMVs) }

// TestHostLayerBenchStages checks the breakdown harness on a small shape:
// the one-op path runs (stages counted, each stage's time positive for the
// GEMVs), and the one-op and separate paths leave the same residual.
func TestHostLayerBenchStages(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	hb, err := host.New(dev, host.Options{Threads: 2, FusedLayer: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer hb.Close()
	h, err := NewHostLayerBench(hb, 16, 40)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	r, err := h.Measure(3)
	if err != nil {
		t.Fatal(err)
	}
	if r.Stages.Steps != 3 {
		t.Fatalf("%d staged steps, want 3", r.Stages.Steps)
	}
	for _, s := range []kernels.DecodeStage{kernels.StageQKV, kernels.StageO, kernels.StageGateUp, kernels.StageDown} {
		if r.Stages.Time[s] <= 0 {
			t.Errorf("stage %v: %v", s, r.Stages.Time[s])
		}
	}
	// Scale 16: D 256, I 896, 2 heads and 1 KV head of 128.
	if want := int64(2 * (256*(256+2*128) + 256*256 + 3*256*896)); r.Layer <= 0 || r.Separate <= 0 || r.GEMVs <= 0 || r.Bytes != want {
		t.Fatalf("times %+v", r)
	}
	// Same input, both paths: residuals within the GEMVs' tolerance.
	x0 := append([]float32(nil), h.x.F32()...)
	if err := h.m.Layers[0].body(h.b, h.ws, h.x, h.cache); err != nil {
		t.Fatal(err)
	}
	sep := append([]float32(nil), h.x.F32()...)
	copy(h.x.F32(), x0)
	if err := h.m.Layers[0].Forward(h.b, h.ws, h.x, h.cache); err != nil {
		t.Fatal(err)
	}
	for i, v := range h.x.F32() {
		if d := v - sep[i]; d > 1e-4 || d < -1e-4 {
			t.Fatalf("residual %d: one op %v, separate ops %v", i, v, sep[i])
		}
	}
}

// TestHostLayerBenchRotates: with Layers 3 and an Alloc, each layer's
// weights are views of a block of its own from Alloc (released at Close),
// the steps visit the layers in turn, and the copied layers compute the
// first one's residual bit for bit (same weights, same cache contents).
func TestHostLayerBenchRotates(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	hb, err := host.New(dev, host.Options{Threads: 2, FusedLayer: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer hb.Close()
	var allocs, releases int
	alloc := func(n int64, label string) (*runtime.DeviceBuffer, func(), error) {
		allocs++
		b, err := dev.Alloc(n, label)
		return b, func() { releases++ }, err
	}
	h, err := NewHostLayerBenchWith(hb, HostLayerBenchConfig{Scale: 16, Context: 20, Layers: 3, Alloc: alloc})
	if err != nil {
		t.Fatal(err)
	}
	if allocs != 3 || h.Layers() != 3 || len(h.WeightBlocks()) != 3 {
		t.Fatalf("%d allocations, %d layers, %d blocks: want 3 each", allocs, h.Layers(), len(h.WeightBlocks()))
	}
	for i, l := range h.m.Layers {
		for _, p := range nn.Parameters(l) {
			if b := p.Peek().Buffer(); b != h.WeightBlocks()[i] {
				t.Fatalf("layer %d: %s is on %q, want its layer's block", i, p.Name(), b.Label())
			}
			if p.Peek().Offset()%hostBenchAlign != 0 {
				t.Fatalf("%s at offset %d: want %d-byte alignment", p.Name(), p.Peek().Offset(), hostBenchAlign)
			}
		}
	}
	var out [3][]float32
	for i := range 4 {
		if h.cur != i%3 {
			t.Fatalf("step %d runs layer %d, want %d", i, h.cur, i%3)
		}
		l := h.m.Layers[h.cur]
		if ran, err := l.decodeLayer(h.b, h.ws, h.x, h.cache, nil); err != nil || !ran {
			t.Fatalf("layer %d: one op ran %v, %v", i, ran, err)
		}
		if i < 3 {
			out[i] = append([]float32(nil), h.x.F32()...)
		}
		h.resetX()
		h.next()
	}
	if !slices.Equal(out[0], out[1]) || !slices.Equal(out[0], out[2]) {
		t.Fatal("the copied layers' residuals differ from the first layer's")
	}
	if _, err := NewHostLayerBenchWith(hb, HostLayerBenchConfig{Scale: 16, Layers: -1}); err == nil {
		t.Fatal("Layers -1 accepted")
	}
	h.Close()
	if releases != 3 {
		t.Fatalf("%d releases at Close, want 3", releases)
	}
}
