//go:build cuda

package bench

import (
	"fmt"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// BenchmarkDecodeOps times each op of a Llama-3-8B decode step alone: a CUDA
// graph of 64 launches of it, replayed; µs/op includes the graph's per-node
// cost, as in the captured decode step. GEMVs report GB/s of weights read
// (q and k fit in the L2 cache, so theirs exceed HBM's), for the persistent
// kernel and the row-block ones at each unroll (loads in flight per lane) and
// warps per row.
func BenchmarkDecodeOps(b *testing.B) {
	r := setup(b)
	cfg := r.m.Cfg
	l := r.m.Layers[0]
	tensor := func(dt runtime.DType, shape ...int) *runtime.Tensor {
		t, err := runtime.NewTensor(r.dev, dt, shape, "decode op bench")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(t.Buffer().Free)
		if dt == runtime.BF16 {
			if err := r.b.FillUniform(t, 5, -1, 1); err != nil {
				b.Fatal(err)
			}
		}
		return t
	}
	const reps = 64
	timeOp := func(b *testing.B, bytes float64, op func() error) {
		g, err := r.b.CaptureStep(func() error {
			for range reps {
				if err := op(); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		defer g.Close()
		s := r.dev.ComputeStream()
		if err := r.b.SetStep([]int32{1}, 512); err != nil {
			b.Fatal(err)
		}
		if err := g.Replay(); err != nil {
			b.Fatal(err)
		}
		s.Synchronize()
		b.ResetTimer()
		start, _ := s.RecordEvent()
		for i := 0; i < b.N; i++ {
			if err := g.Replay(); err != nil {
				b.Fatal(err)
			}
		}
		end, _ := s.RecordEvent()
		if err := end.Synchronize(); err != nil {
			b.Fatal(err)
		}
		el, _ := end.ElapsedSince(start)
		us := el.Seconds() * 1e6 / float64(b.N*reps)
		b.ReportMetric(us, "µs/op")
		if bytes > 0 {
			b.ReportMetric(bytes/(us*1e-6)/1e9, "GB/s")
		}
	}
	D, I := cfg.HiddenSize, cfg.IntermediateSize
	xD, xI := tensor(runtime.BF16, 1, D), tensor(runtime.BF16, 1, I)
	for _, c := range []struct {
		name string
		w    *runtime.Tensor
		x    *runtime.Tensor
		f32  bool
	}{
		{"q", l.Attn.Q.Weight.Tensor(), xD, false}, {"k", l.Attn.K.Weight.Tensor(), xD, false},
		{"gate", l.MLP.Gate.Weight.Tensor(), xD, false}, {"down", l.MLP.Down.Weight.Tensor(), xI, false},
		{"lm_head", r.m.Head.Weight.Tensor(), xD, true},
	} {
		N := c.w.Dim(0)
		dt := runtime.BF16
		unrolls := []int{4, 8, 16}
		if c.f32 {
			dt, unrolls = runtime.F32, []int{8, 16}
		}
		out := tensor(dt, 1, N)
		b.Run(fmt.Sprintf("gemv_%s_%dx%d_persistent", c.name, N, c.w.Dim(1)), func(b *testing.B) {
			timeOp(b, float64(c.w.NumBytes()), func() error { return r.b.MatMul(out, c.x, c.w) })
		})
		for _, u := range unrolls {
			for _, wpr := range []int{0, 1, 2, 4, 8} {
				b.Run(fmt.Sprintf("gemv_%s_%dx%d_rowblocks_u%d_wpr%d", c.name, N, c.w.Dim(1), u, wpr), func(b *testing.B) {
					r.b.GEMVRowBlocks, r.b.GEMVUnroll, r.b.GEMVWarpsPerRow = true, u, wpr
					defer func() { r.b.GEMVRowBlocks, r.b.GEMVUnroll, r.b.GEMVWarpsPerRow = false, 0, 0 }()
					timeOp(b, float64(c.w.NumBytes()), func() error { return r.b.MatMul(out, c.x, c.w) })
				})
			}
		}
	}
	H, K, d := cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.HeadDim
	xF := tensor(runtime.F32, 1, D)
	oF := tensor(runtime.F32, 1, D)
	h := tensor(runtime.BF16, 1, D)
	q, k, v := tensor(runtime.BF16, 1, H, d), tensor(runtime.BF16, 1, K, d), tensor(runtime.BF16, 1, K, d)
	kc, vc := tensor(runtime.BF16, 1024, K, d), tensor(runtime.BF16, 1024, K, d)
	att := tensor(runtime.BF16, 1, H, d)
	g, u := tensor(runtime.BF16, 1, I), tensor(runtime.BF16, 1, I)
	inv := r.m.InvFreq()
	for _, c := range []struct {
		name string
		op   func() error
	}{
		{"add_f32_4096", func() error { return r.b.Add(xF, xF, oF) }},
		{"rmsnorm_f32in_4096", func() error { return r.b.RMSNorm(h, xF, l.InputNorm.Weight.Tensor(), 1e-5) }},
		{"rope_store", func() error { return r.b.RoPEStoreKV(q, k, v, kc, vc, 512, inv) }},
		{"attention_ctx512", func() error { return r.b.Attention(att, q, kc, vc, 512) }},
		{"silu_mul_14336", func() error { return r.b.SiLUMul(g, g, u) }},
		{"gemv3_qkv", func() error {
			return r.b.MatMulN([]*runtime.Tensor{q, k, v}, h, []*runtime.Tensor{l.Attn.Q.Weight.Tensor(), l.Attn.K.Weight.Tensor(), l.Attn.V.Weight.Tensor()})
		}},
		{"gateup_silu", func() error { return r.b.GateUpSiLU(g, h, l.MLP.Gate.Weight.Tensor(), l.MLP.Up.Weight.Tensor()) }},
	} {
		b.Run(c.name, func(b *testing.B) { timeOp(b, 0, c.op) })
	}
}
