//go:build cuda

package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/models/llama"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// The resident Llama-3-8B benchmarks: the llama3-8b shape (hidden 4096,
// intermediate 14336, 32 layers, 32/8 heads, vocab 128256; 16.06 GB of BF16
// weights) with random weights made on the GPU (uniform, the scales of
// llama.MakeCheckpoint), batch 1. Each reports milliseconds next to its
// floor: decode at the HBM bandwidth measured by BenchmarkCopyD2D (every
// weight but the embedding read once), prefill at 790 TFLOP/s (the bf16
// matrix rate measured on this machine, KINDS.md) for the GEMM and attention
// FLOPs.

type resident struct {
	dev   *cuda.Device
	b     *cudabackend.Backend
	m     *llama.Model
	bufs  []*runtime.DeviceBuffer
	bytes int64 // weight bytes
}

var (
	setupOnce sync.Once
	res       *resident
	setupErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if res != nil {
		res.m.Close()
		for _, b := range res.bufs {
			b.Free()
		}
		if err := res.dev.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "device close:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func setup(tb testing.TB) *resident {
	setupOnce.Do(func() {
		r := &resident{}
		if r.dev, setupErr = cuda.Open(0); setupErr != nil {
			return
		}
		if r.b, setupErr = cudabackend.New(r.dev); setupErr != nil {
			return
		}
		cfg := llama.Shapes["llama3-8b"]
		if r.m, setupErr = llama.New(&cfg); setupErr != nil {
			return
		}
		shapes := r.m.ParamShapes()
		start := time.Now()
		for i, p := range nn.Parameters(r.m) {
			shape := shapes[p.Name()]
			t, err := runtime.NewTensor(r.dev, runtime.BF16, shape, p.Name())
			if err != nil {
				setupErr = err
				return
			}
			r.bufs = append(r.bufs, t.Buffer())
			r.bytes += t.NumBytes()
			lo, hi := float32(0.5), float32(1.5) // norms
			if len(shape) == 2 {
				s := float32(0.02 * math.Sqrt(3) / math.Sqrt(float64(shape[1])/4096))
				lo, hi = -s, s
			}
			if err := r.b.FillUniform(t, uint64(i)*0x9e3779b97f4a7c15+1, lo, hi); err != nil {
				setupErr = err
				return
			}
			if err := p.Bind(t); err != nil {
				setupErr = err
				return
			}
		}
		if setupErr = r.dev.Synchronize(); setupErr != nil {
			return
		}
		fmt.Printf("# %s (%s, cc %d, %d SMs, driver %d): llama3-8b resident, %.2f GB of weights made on the device in %v\n",
			r.dev.Name(), r.dev.Model(), r.dev.ComputeCapability(), r.dev.Multiprocessors(), r.dev.DriverVersion(),
			float64(r.bytes)/1e9, time.Since(start).Round(time.Millisecond))
		res = r
	})
	if setupErr != nil {
		tb.Fatal(setupErr)
	}
	return res
}

func randomIDs(n, vocab int) []int32 {
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(rng.IntN(vocab))
	}
	return ids
}

// hbmGBps is the device-to-device copy bandwidth (bytes read + written),
// measured by BenchmarkCopyD2D when it runs first; 4300 (KINDS.md) until then.
var hbmGBps = 4300.0

// BenchmarkCopyD2D measures the HBM ceiling: 4 GiB device-to-device copies.
func BenchmarkCopyD2D(b *testing.B) {
	r := setup(b)
	const n = 4 << 30
	src, err := r.dev.Alloc(n, "copy src")
	if err != nil {
		b.Fatal(err)
	}
	defer src.Free()
	dst, err := r.dev.Alloc(n, "copy dst")
	if err != nil {
		b.Fatal(err)
	}
	defer dst.Free()
	s := r.dev.ComputeStream()
	s.CopyD2D(dst, 0, src, 0, n)
	s.Synchronize()
	start, _ := s.RecordEvent()
	for i := 0; i < b.N; i++ {
		if err := s.CopyD2D(dst, 0, src, 0, n); err != nil {
			b.Fatal(err)
		}
	}
	end, _ := s.RecordEvent()
	end.Synchronize()
	el, _ := end.ElapsedSince(start)
	hbmGBps = 2 * n * float64(b.N) / el.Seconds() / 1e9
	b.ReportMetric(hbmGBps, "GB/s")
}

// decodeBytes is what one decode step must read: every weight but the
// embedding table (one row of it) and the KV cache up to ctx.
func decodeBytes(r *resident, ctx int) float64 {
	c := r.m.Cfg
	embed := float64(c.VocabSize * c.HiddenSize * 2)
	kv := float64(2 * c.NumHiddenLayers * ctx * c.NumKeyValueHeads * c.HeadDim * 2)
	return float64(r.bytes) - embed + kv
}

// prefillFLOPs counts the GEMMs of n tokens (the LM head for the last only)
// and causal attention.
func prefillFLOPs(r *resident, n int) float64 {
	c := r.m.Cfg
	D, I, L := float64(c.HiddenSize), float64(c.IntermediateSize), float64(c.NumHiddenLayers)
	kvd := float64(c.NumKeyValueHeads * c.HeadDim)
	perTok := L * 2 * (D*D + 2*D*kvd + D*D + 3*D*I)
	attn := L * float64(c.NumAttentionHeads) * 2 * float64(n) * float64(n) * float64(c.HeadDim) // QKᵀ and PV, causal half of 2·2
	return perTok*float64(n) + attn + 2*D*float64(c.VocabSize)
}

const matrixTFLOPs = 790.0

func BenchmarkLlama3_8B(b *testing.B) {
	r := setup(b)
	for _, n := range []int{512, 2048} {
		b.Run(fmt.Sprintf("prefill%d", n), func(b *testing.B) {
			cache, err := r.m.NewKVCache(r.b, n)
			if err != nil {
				b.Fatal(err)
			}
			defer cache.Free()
			ids := randomIDs(n, r.m.Cfg.VocabSize)
			s := r.dev.ComputeStream()
			for range 2 { // warm-up: workspace, cuBLAS heuristics
				cache.Reset()
				if _, err := r.m.Forward(r.b, cache, ids, false); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.Synchronize(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cache.Reset()
				if _, err := r.m.Forward(r.b, cache, ids, false); err != nil {
					b.Fatal(err)
				}
				if err := s.Synchronize(); err != nil {
					b.Fatal(err)
				}
			}
			ms := b.Elapsed().Seconds() * 1e3 / float64(b.N)
			fl := prefillFLOPs(r, n)
			b.ReportMetric(ms, "ms/forward")
			b.ReportMetric(fl/(ms/1e3)/1e12, "TFLOP/s")
			b.ReportMetric(fl/(matrixTFLOPs*1e12)*1e3, "floor-ms")
		})
	}
	for _, mode := range []string{"graph", "graph_rowblock_gemv", "eager"} {
		b.Run("decode_ctx512_"+mode, func(b *testing.B) {
			r.b.GEMVRowBlocks = mode == "graph_rowblock_gemv"
			defer func() { r.b.GEMVRowBlocks = false }()
			const ctx = 512
			cache, err := r.m.NewKVCache(r.b, ctx+1)
			if err != nil {
				b.Fatal(err)
			}
			defer cache.Free()
			if _, err := r.m.Forward(r.b, cache, randomIDs(ctx, r.m.Cfg.VocabSize), false); err != nil {
				b.Fatal(err)
			}
			s := r.dev.ComputeStream()
			var g *llama.DecodeGraph
			step := func(id int32) error {
				if g != nil {
					_, err := g.StepAt(id, ctx)
					return err
				}
				if err := cache.Truncate(ctx); err != nil {
					return err
				}
				_, err := r.m.Forward(r.b, cache, []int32{id}, false)
				return err
			}
			if mode != "eager" {
				if g, err = r.m.CaptureDecode(r.b, cache); err != nil {
					b.Fatal(err)
				}
				defer g.Close()
			}
			for i := range 3 {
				if err := step(int32(i)); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.Synchronize(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start, _ := s.RecordEvent()
			for i := 0; i < b.N; i++ {
				if err := step(int32(i % 1000)); err != nil {
					b.Fatal(err)
				}
			}
			end, _ := s.RecordEvent()
			if err := end.Synchronize(); err != nil {
				b.Fatal(err)
			}
			el, _ := end.ElapsedSince(start)
			ms := el.Seconds() * 1e3 / float64(b.N)
			bytes := decodeBytes(r, ctx)
			b.ReportMetric(ms, "ms/step")
			b.ReportMetric(bytes/(ms/1e3)/1e9, "GB/s")
			b.ReportMetric(bytes/(hbmGBps*1e9)*1e3, "floor-ms")
		})
	}
}
