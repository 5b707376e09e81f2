//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// withEarly runs fn with the early-load GEMVs on (early) or off, and
// dependent launch as given.
func withEarly(t *testing.T, early, pdl bool, fn func()) {
	t.Helper()
	gb.NoEarlyWeights = !early
	gb.dev.SetDependentLaunch(pdl)
	defer func() {
		gb.NoEarlyWeights = noEarlyWeightsFromEnv()
		gb.dev.SetDependentLaunch(true)
	}()
	fn()
}

// TestEarlyWeightsGPU: every one-token BF16 GEMV (MatMul persistent into
// BF16 and F32, the row-block kernels, MatMulAdd, MatMulN, GateUpSiLU)
// with early weight loads gives the same bits as without, and the CPU
// reference's values, with dependent launch on and off; shapes where every
// lane has a first batch, where some have none (short rows) and where a
// warp has several rows.
func TestEarlyWeightsGPU(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, pdl := range []bool{true, false} {
		for _, c := range []struct{ N, D int }{{4096, 4096}, {1000, 136}, {14336, 4096}, {4096, 14336}, {333, 1032}} {
			t.Run(fmt.Sprintf("pdl=%v/%dx%d", pdl, c.N, c.D), func(t *testing.T) {
				x := randBF16(rng, c.D, 1)
				w := randBF16(rng, c.N*c.D, float32(1/math.Sqrt(float64(c.D))))
				w2 := randBF16(rng, c.N*c.D, float32(1/math.Sqrt(float64(c.D))))
				y0 := randBF16(rng, c.N, 4)
				gx, gw, gw2 := gpu(t, runtime.BF16, x, 1, c.D), gpu(t, runtime.BF16, w, c.N, c.D), gpu(t, runtime.BF16, w2, c.N, c.D)
				hx, hw, hw2 := host(t, runtime.F32, x, 1, c.D), host(t, runtime.BF16, w, c.N, c.D), host(t, runtime.BF16, w2, c.N, c.D)
				ref, ref2 := host(t, runtime.F32, nil, 1, c.N), host(t, runtime.F32, nil, 1, c.N)
				if err := cb.MatMul(ref, hx, hw); err != nil {
					t.Fatal(err)
				}
				if err := cb.MatMul(ref2, hx, hw2); err != nil {
					t.Fatal(err)
				}
				type result map[string][]float32
				run := func(early bool) result {
					r := result{}
					withEarly(t, early, pdl, func() {
						for _, od := range []runtime.DType{runtime.BF16, runtime.F32} {
							for _, rb := range []bool{false, true} {
								gb.GEMVRowBlocks = rb
								out := poisoned(t, od, 1, c.N)
								err := gb.MatMul(out, gx, gw)
								gb.GEMVRowBlocks = false
								if err != nil {
									t.Fatal(err)
								}
								r[fmt.Sprintf("MatMul %v rowblocks=%v", od, rb)] = read(t, out)
							}
						}
						y := gpu(t, runtime.F32, y0, 1, c.N)
						if err := gb.MatMulAdd(y, gx, gw); err != nil {
							t.Fatal(err)
						}
						r["MatMulAdd"] = read(t, y)
						outs := []*runtime.Tensor{poisoned(t, runtime.BF16, 1, c.N), poisoned(t, runtime.BF16, 1, c.N), poisoned(t, runtime.BF16, 1, c.N)}
						if err := gb.MatMulN(outs, gx, []*runtime.Tensor{gw, gw2, gw}); err != nil {
							t.Fatal(err)
						}
						for i, o := range outs {
							r[fmt.Sprintf("MatMulN %d", i)] = read(t, o)
						}
						act := poisoned(t, runtime.BF16, 1, c.N)
						if err := gb.GateUpSiLU(act, gx, gw, gw2); err != nil {
							t.Fatal(err)
						}
						r["GateUpSiLU"] = read(t, act)
					})
					return r
				}
				early, plain := run(true), run(false)
				for name, got := range early {
					if !slices.Equal(got, plain[name]) {
						t.Errorf("%s: early weight loads change the result", name)
					}
				}
				for _, od := range []string{"BF16", "F32"} {
					atol, rtol := 1e-4, 1e-4
					if od == "BF16" {
						atol, rtol = 2e-3, 8e-3
					}
					compare(t, "MatMul "+od, early["MatMul "+od+" rowblocks=false"], ref.F32(), atol, rtol)
					compare(t, "MatMul rowblocks "+od, early["MatMul "+od+" rowblocks=true"], ref.F32(), atol, rtol)
				}
				sum := slices.Clone(ref.F32())
				for i := range sum {
					sum[i] += runtime.BF16ToF32(runtime.F32ToBF16(y0[i]))
				}
				compare(t, "MatMulAdd", early["MatMulAdd"], sum, 1e-4, 1e-4)
				compare(t, "MatMulN 0", early["MatMulN 0"], ref.F32(), 2e-3, 8e-3)
				compare(t, "MatMulN 1", early["MatMulN 1"], ref2.F32(), 2e-3, 8e-3)
				if err := cb.SiLUMul(ref, ref, ref2); err != nil {
					t.Fatal(err)
				}
				compare(t, "GateUpSiLU", early["GateUpSiLU"], ref.F32(), 2e-3, 8e-3)
			})
		}
	}
}

// TestEarlyWeightsFP8GPU: the FP8 GEMVs (gemv_fp8_v, gemv3_fp8,
// gemv_gateup_silu_fp8) of every variant with early weight loads give the
// same bits as without, and the CPU reference's values.
func TestEarlyWeightsFP8GPU(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct{ N, D, block int }{{4096, 4096, 128}, {1001, 528, 0}, {77, 16, 16}, {4096, 14336, 0}} {
		layout := kernels.FP8Layout{Block: c.block}
		t.Run(fmt.Sprintf("%dx%d_%v", c.N, c.D, layout), func(t *testing.T) {
			x := randBF16(rng, c.D, 1)
			gx := gpu(t, runtime.BF16, x, 1, c.D)
			w1 := newFP8Weight(t, rng, c.N, c.D, layout, runtime.F32)
			w2 := newFP8Weight(t, rng, c.N, c.D, layout, runtime.F32)
			ref := fp8Ref(t, x, w1, layout)
			eachFP8Variant(t, func(t *testing.T) {
				run := func(early bool) map[string][]float32 {
					r := map[string][]float32{}
					withEarly(t, early, true, func() {
						if gb.fp8GEMVs(w1.g) != gb.k.fp8.early[gb.FP8Variant] && early {
							t.Fatal("the early FP8 kernels are not the ones picked")
						}
						out := poisoned(t, runtime.F32, 1, c.N)
						if err := gb.MatMulFP8(out, gx, w1.g, w1.gs, layout); err != nil {
							t.Fatal(err)
						}
						r["gemv"] = read(t, out)
						outs := []*runtime.Tensor{poisoned(t, runtime.BF16, 1, c.N), poisoned(t, runtime.BF16, 1, c.N), poisoned(t, runtime.BF16, 1, c.N)}
						if err := gb.MatMulNFP8(outs, gx, []*runtime.Tensor{w1.g, w2.g, w1.g}, []*runtime.Tensor{w1.gs, w2.gs, w1.gs}, layout); err != nil {
							t.Fatal(err)
						}
						for i, o := range outs {
							r[fmt.Sprintf("gemv3 %d", i)] = read(t, o)
						}
						act, up := poisoned(t, runtime.BF16, 1, c.N), poisoned(t, runtime.BF16, 1, c.N)
						if err := gb.GateUpSiLUFP8(act, up, gx, w1.g, w2.g, w1.gs, w2.gs, layout); err != nil {
							t.Fatal(err)
						}
						r["gateup"] = read(t, act)
					})
					return r
				}
				early, plain := run(true), run(false)
				for name, got := range early {
					if !slices.Equal(got, plain[name]) {
						t.Errorf("%s: early weight loads change the result", name)
					}
				}
				compare(t, "gemv_fp8_v", early["gemv"], ref, 2e-4, 1e-4)
				compare(t, "gemv3_fp8 q", early["gemv3 0"], ref, 1e-3, 8e-3)
			})
		})
	}
}

// TestEarlyWeightFenceGPU: a weight that FillUniform (a kernel) just wrote
// is fenced: the GEMV over it runs the plain kernel, and gives the CPU
// reference's values; the GEMV's launch lowers the fence, and other
// weights are not fenced.
func TestEarlyWeightFenceGPU(t *testing.T) {
	needGPU(t)
	const N, D = 4096, 4096
	gw := gpu(t, runtime.BF16, nil, N, D)
	other := gpu(t, runtime.BF16, make([]float32, 64*D), 64, D)
	x := randBF16(newRNG(t), D, 1)
	gx := gpu(t, runtime.BF16, x, 1, D)
	if err := gb.FillUniform(gw, 7, -0.02, 0.02); err != nil {
		t.Fatal(err)
	}
	if gb.earlyLoads(gw) || !gb.earlyLoads(other) {
		t.Fatalf("after FillUniform: early loads over the filled weight %v (want false), over another %v (want true)",
			gb.earlyLoads(gw), gb.earlyLoads(other))
	}
	out := poisoned(t, runtime.F32, 1, N)
	if err := gb.MatMul(out, gx, gw); err != nil {
		t.Fatal(err)
	}
	if !gb.earlyLoads(gw) {
		t.Error("the GEMV's launch did not lower the fence")
	}
	wv := read(t, gw)
	ref := host(t, runtime.F32, nil, 1, N)
	if err := cb.MatMul(ref, host(t, runtime.F32, x, 1, D), host(t, runtime.BF16, wv, N, D)); err != nil {
		t.Fatal(err)
	}
	compare(t, "MatMul after FillUniform", read(t, out), ref.F32(), 1e-4, 1e-4)
}
