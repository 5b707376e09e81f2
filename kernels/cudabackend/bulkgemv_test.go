//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// needBulk skips t off compute capability 9.0 and fails it where the
// bulk-copy module does not load there; it turns GEMVBulk on until t ends.
func needBulk(t *testing.T) {
	t.Helper()
	needGPU(t)
	if cc := gdev.ComputeCapability(); cc != 90 {
		t.Skipf("bulk-copy GEMVs need compute capability 9.0; this GPU is %d", cc)
	}
	if err := gb.k.bulk.load(); err != nil {
		t.Fatal(err)
	}
	gb.GEMVBulk = true
	t.Cleanup(func() { gb.GEMVBulk = false })
}

// bulkShape is one decode layer's dimensions plus an LM head.
type bulkShape struct{ D, Nq, Nkv, I, V int }

// bulkStep runs one decode layer's products (q/k/v fused, o and down into
// the residual, gate·up·SiLU fused) and the LM head, eagerly, and returns
// the outputs by name.
type bulkStep struct {
	c                   bulkShape
	x, xi, res0         []float32
	gx, gxi             *runtime.Tensor
	gws                 []*runtime.Tensor
	go_, gd, gg, gu, gh *runtime.Tensor
	wq, wv, wo, wd      []float32
	wg, wu, wh          []float32
}

func newBulkStep(t *testing.T, c bulkShape) *bulkStep {
	rng := newRNG(t)
	s := &bulkStep{c: c}
	sc := float32(1 / math.Sqrt(float64(c.D)))
	si := float32(1 / math.Sqrt(float64(c.I)))
	s.x, s.xi, s.res0 = randBF16(rng, c.D, 1), randBF16(rng, c.I, 1), randBF16(rng, c.D, 4)
	s.wq, s.wv = randBF16(rng, c.Nq*c.D, sc), randBF16(rng, c.Nkv*c.D, sc)
	wk := randBF16(rng, c.Nkv*c.D, sc)
	s.wo, s.wd = randBF16(rng, c.D*c.Nq, float32(1/math.Sqrt(float64(c.Nq)))), randBF16(rng, c.D*c.I, si)
	s.wg, s.wu, s.wh = randBF16(rng, c.I*c.D, sc), randBF16(rng, c.I*c.D, sc), randBF16(rng, c.V*c.D, sc)
	s.gx, s.gxi = gpu(t, runtime.BF16, s.x, 1, c.D), gpu(t, runtime.BF16, s.xi, 1, c.I)
	s.gws = []*runtime.Tensor{gpu(t, runtime.BF16, s.wq, c.Nq, c.D), gpu(t, runtime.BF16, wk, c.Nkv, c.D), gpu(t, runtime.BF16, s.wv, c.Nkv, c.D)}
	s.go_, s.gd = gpu(t, runtime.BF16, s.wo, c.D, c.Nq), gpu(t, runtime.BF16, s.wd, c.D, c.I)
	s.gg, s.gu, s.gh = gpu(t, runtime.BF16, s.wg, c.I, c.D), gpu(t, runtime.BF16, s.wu, c.I, c.D), gpu(t, runtime.BF16, s.wh, c.V, c.D)
	return s
}

// outputs are a step's output tensors.
type bulkOuts struct{ q, k, v, res, act, logits, proj *runtime.Tensor }

func (s *bulkStep) outs(t *testing.T) bulkOuts {
	c := s.c
	return bulkOuts{q: poisoned(t, runtime.BF16, 1, c.Nq), k: poisoned(t, runtime.BF16, 1, c.Nkv), v: poisoned(t, runtime.BF16, 1, c.Nkv),
		res: gpu(t, runtime.F32, s.res0, 1, c.D), act: poisoned(t, runtime.BF16, 1, c.I), logits: poisoned(t, runtime.F32, 1, c.V),
		proj: poisoned(t, runtime.BF16, 1, c.I)}
}

// run enqueues the products into o (o.res gets o_proj of q and down_proj
// of xi added).
func (s *bulkStep) run(o bulkOuts) error {
	if err := gb.MatMulN([]*runtime.Tensor{o.q, o.k, o.v}, s.gx, s.gws); err != nil {
		return err
	}
	if err := gb.MatMulAdd(o.res, o.q, s.go_); err != nil {
		return err
	}
	if err := gb.GateUpSiLU(o.act, s.gx, s.gg, s.gu); err != nil {
		return err
	}
	if err := gb.MatMulAdd(o.res, s.gxi, s.gd); err != nil {
		return err
	}
	if err := gb.MatMul(o.proj, s.gx, s.gg); err != nil { // a plain bf16 one-token product
		return err
	}
	return gb.MatMul(o.logits, s.gx, s.gh)
}

func (o bulkOuts) read(t *testing.T) map[string][]float32 {
	return map[string][]float32{"q": read(t, o.q), "k": read(t, o.k), "v": read(t, o.v), "res": read(t, o.res), "act": read(t, o.act),
		"logits": read(t, o.logits), "proj": read(t, o.proj)}
}

// TestBulkGEMV: with GEMVBulk the one-token products of a decode layer —
// MatMulN (q/k/v), MatMulAdd (o, down), GateUpSiLU, MatMul into BF16 and
// into F32 (the LM head) — give the bits of gemv.cu's persistent kernels
// (the same per-lane order and warp reduction) and the CPU reference's
// values, with and without dependent launch, on Llama-3-8B's layer (LM head
// cut to 32,000 rows), a 5120-wide shape, and odd sizes (rows fewer than
// SMs, rows not multiples of a stage, widths of 24 and 136 columns, a one-row LM head). A
// kernel profile shows the bulk kernels ran. About 10 s on an H200.
func TestBulkGEMV(t *testing.T) {
	needBulk(t)
	for _, c := range []bulkShape{{4096, 4096, 1024, 14336, 32000}, {5120, 640, 128, 1000, 777}, {136, 64, 16, 96, 100}, {24, 8, 8, 40, 1}} {
		t.Run(fmt.Sprintf("D%d", c.D), func(t *testing.T) {
			s := newBulkStep(t, c)
			gb.GEMVBulk = false
			def := s.outs(t)
			if err := s.run(def); err != nil {
				t.Fatal(err)
			}
			want := def.read(t)
			gb.GEMVBulk = true

			// The CPU reference of what the default path computed from its own q.
			ref := func(xv []float32, w []float32, N, K int) []float32 {
				r := host(t, runtime.F32, nil, 1, N)
				if err := cb.MatMul(r, host(t, runtime.F32, xv, 1, K), host(t, runtime.BF16, w, N, K)); err != nil {
					t.Fatal(err)
				}
				return r.F32()
			}
			compare(t, "q (default) against the CPU", want["q"], ref(s.x, s.wq, c.Nq, c.D), 2e-3, 8e-3)
			compare(t, "v (default) against the CPU", want["v"], ref(s.x, s.wv, c.Nkv, c.D), 2e-3, 8e-3)
			compare(t, "logits (default) against the CPU", want["logits"], ref(s.x, s.wh, c.V, c.D), 1e-4, 1e-4)
			g, u := ref(s.x, s.wg, c.I, c.D), ref(s.x, s.wu, c.I, c.D)
			act := make([]float32, c.I)
			for i := range act {
				act[i] = g[i] / (1 + float32(math.Exp(float64(-g[i])))) * u[i]
			}
			compare(t, "act (default) against the CPU", want["act"], act, 2e-3, 1e-2)
			o, d := ref(want["q"], s.wo, c.D, c.Nq), ref(s.xi, s.wd, c.D, c.I)
			res := make([]float32, c.D)
			for i := range res {
				res[i] = s.res0[i] + o[i] + d[i]
			}
			compare(t, "residual (default) against the CPU", want["res"], res, 1e-3, 1e-3)

			for _, pdl := range []bool{true, false} {
				t.Run(fmt.Sprintf("pdl=%v", pdl), func(t *testing.T) {
					gdev.SetDependentLaunch(pdl)
					defer gdev.SetDependentLaunch(true)
					b := s.outs(t)
					if err := s.run(b); err != nil {
						t.Fatal(err)
					}
					got := b.read(t)
					for _, name := range []string{"q", "k", "v", "res", "act", "logits", "proj"} {
						if !slices.Equal(got[name], want[name]) {
							t.Errorf("%s: the bulk GEMV differs from the persistent kernel's bits", name)
							compare(t, name, got[name], want[name], 2e-3, 1e-2)
						}
					}
				})
			}
			names := profiled(t, func() error { return s.run(s.outs(t)) })
			for _, k := range []string{"gemv_bulk_bf16", "gemv_bulk_f32acc", "gemv_bulk_gateup_silu", "gemv_bulk_f32out"} {
				if !slices.Contains(names, k) {
					t.Errorf("kernel %s did not run (ran %v)", k, names)
				}
			}
		})
	}
}

// TestBulkGEMVFallback: a width whose ring would not fit (two stages of
// one 80 KB row and the 80 KB input do not fit in the block's shared
// memory) runs on gemv.cu's kernels, correctly.
func TestBulkGEMVFallback(t *testing.T) {
	needBulk(t)
	rng := newRNG(t)
	const N, D = 40, 40000
	if _, ok := gb.k.bulk.plan(N, D, false, gb.sms); ok {
		t.Fatalf("plan(%d, %d) fits; the test wants a width that does not", N, D)
	}
	x, w := randBF16(rng, D, 1), randBF16(rng, N*D, 0.005)
	gx, gw := gpu(t, runtime.BF16, x, 1, D), gpu(t, runtime.BF16, w, N, D)
	out := poisoned(t, runtime.F32, 1, N)
	names := profiled(t, func() error { return gb.MatMul(out, gx, gw) })
	if slices.Contains(names, "gemv_bulk_f32out") {
		t.Errorf("the bulk kernel ran for width %d: %v", D, names)
	}
	r := host(t, runtime.F32, nil, 1, N)
	if err := cb.MatMul(r, host(t, runtime.F32, x, 1, D), host(t, runtime.BF16, w, N, D)); err != nil {
		t.Fatal(err)
	}
	compare(t, "fallback", read(t, out), r.F32(), 1e-4, 1e-4)
}

// TestBulkGEMVCapturedStep: a decode layer's products on the bulk GEMVs
// captured as a CUDA graph and replayed give the eager launches' bits
// (Llama-3-8B's layer, LM head cut to 32,000 rows; dependent launch on).
// About 3 s.
func TestBulkGEMVCapturedStep(t *testing.T) {
	needBulk(t)
	s := newBulkStep(t, bulkShape{4096, 4096, 1024, 14336, 32000})
	eager := s.outs(t)
	if err := s.run(eager); err != nil {
		t.Fatal(err)
	}
	want := eager.read(t)
	o := s.outs(t)
	res0 := read(t, o.res)
	graph, err := gb.CaptureStep(func() error { return s.run(o) })
	if err != nil {
		t.Fatal(err)
	}
	defer graph.Close()
	for i := range 3 {
		if err := gb.WriteBytes(o.res, f32Bytes(res0)); err != nil {
			t.Fatal(err)
		}
		if err := graph.Replay(); err != nil {
			t.Fatal(err)
		}
		got := o.read(t)
		for name, w := range want {
			if !slices.Equal(got[name], w) {
				t.Errorf("replay %d: %s differs from the eager step", i, name)
			}
		}
	}
}

// TestBulkReadRate reports the read rate of plain 16-byte vector loads and
// of bulk copies into a shared-memory ring (32 KiB stages, 112 KiB and
// 192 KiB of ring) at the sizes of a Llama-3-8B decode step's GEMVs (o
// 33.5 MB, q/k/v 50 MB, down 117 MB, gate·up 235 MB, the LM head 1 GB);
// run with -v. Each rate must be above 1 TB/s (anything less is a broken
// kernel, not a slow GPU). About 5 s.
func TestBulkReadRate(t *testing.T) {
	needBulk(t)
	for _, mb := range []float64{33.5, 50.3, 117.4, 234.9, 1050.6} {
		bytes := int64(mb*1e6) &^ 4095
		for _, ring := range []int{112 << 10, 192 << 10} {
			vec, bulk, err := gb.BulkReadRate(bytes, 10, 32<<10, ring)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%7.1f MB: vector loads %6.0f GB/s, bulk copies (ring %3d KiB) %6.0f GB/s", mb, vec/1e9, ring>>10, bulk/1e9)
			if vec < 1e12 || bulk < 1e12 {
				t.Errorf("%.1f MB: %.0f / %.0f GB/s, below 1 TB/s", mb, vec/1e9, bulk/1e9)
			}
		}
	}
}
