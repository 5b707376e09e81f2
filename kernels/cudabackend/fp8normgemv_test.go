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

// fp8NormCase is one shape of the folded-norm FP8 GEMV tests: x's values
// of magnitude xs (1e5: x·nw past f16's range, the kernels' scaled
// staging).
type fp8NormCase struct {
	N     [3]int // q/k/v rows; gate·up: N[0]
	D     int
	block int
	sdt   runtime.DType
	xs    float32
}

var fp8NormCases = []fp8NormCase{
	{[3]int{4096, 1024, 1024}, 4096, 0, runtime.BF16, 4},   // Llama-3-8B, per channel
	{[3]int{4096, 1024, 1024}, 4096, 128, runtime.F32, 4},  // 128-blocks
	{[3]int{4096, 1024, 1024}, 4096, 0, runtime.BF16, 1e5}, // x·nw beyond f16
	{[3]int{100, 37, 37}, 528, 0, runtime.F32, 1},          // K not a multiple of 128
	{[3]int{130, 66, 65}, 320, 64, runtime.BF16, 1},        // partial edge blocks
	{[3]int{7, 3, 5}, 4096, 0, runtime.BF16, 1},            // odd counts
	{[3]int{64, 32, 32}, 128, 16, runtime.F32, 1},          // 16-blocks: no tensor-core kernel, declined
}

// fp8NormInputs are x (F32 [1,D], values in ±xs) and nw (BF16 [D], about
// 1) on the GPU, and h = RMSNorm(x)·nw by the CPU reference (F32).
func fp8NormInputs(t *testing.T, c fp8NormCase) (gx, gnw *runtime.Tensor, h *runtime.Tensor) {
	t.Helper()
	rng := newRNG(t)
	x := randBF16(rng, c.D, c.xs)
	nw := randBF16(rng, c.D, 1)
	for i := range nw {
		nw[i] = runtime.BF16ToF32(runtime.F32ToBF16(0.5 + nw[i]*nw[i]))
	}
	gx, gnw = gpu(t, runtime.F32, x, 1, c.D), gpu(t, runtime.BF16, nw, c.D)
	h = host(t, runtime.F32, nil, 1, c.D)
	if err := cb.RMSNorm(h, host(t, runtime.F32, x, 1, c.D), host(t, runtime.BF16, nw, c.D), 1e-5); err != nil {
		t.Fatal(err)
	}
	return gx, gnw, h
}

// fp8NormFolds is whether the folded kernels take the case under gb's
// FT_FP8_VARIANT: the tensor-core variants (auto's picks, mm2, mm4 and
// their persistent forms) with blocks of 64 or more, or per channel.
func fp8NormFolds(c fp8NormCase) bool {
	v := gb.FP8Variant
	mma := slices.ContainsFunc(fp8Variants, func(f fp8Variant) bool { return f.Name == v && f.MMA })
	return (v == fp8AutoVariant || mma) && fp8MMATakes(c.block, gb.k.fp8.cc)
}

// TestNormMatMulNFP8: gemv3_fp8_norm_mm2/mm4 (NormMatMulNFP8 under every
// FT_FP8_VARIANT) against the CPU's RMSNorm then its FP8 products, within
// the FP8 GEMVs' tolerance; the scalar variants, 16-blocks and
// NoFP8FusedNorm decline with nothing written.
func TestNormMatMulNFP8(t *testing.T) {
	needGPU(t)
	for _, c := range fp8NormCases {
		layout := kernels.FP8Layout{Block: c.block}
		t.Run(fmt.Sprintf("%v_%d_%v_scale%v_x%g", c.N, c.D, layout, c.sdt, c.xs), func(t *testing.T) {
			gx, gnw, h := fp8NormInputs(t, c)
			rng := newRNG(t)
			var ws, ss []*runtime.Tensor
			var refs [3]*runtime.Tensor
			for i, n := range c.N {
				w := newFP8Weight(t, rng, n, c.D, layout, c.sdt)
				ws, ss = append(ws, w.g), append(ss, w.gs)
				refs[i] = host(t, runtime.F32, nil, 1, n)
				if err := cb.MatMulFP8(refs[i], h, w.h, w.hs, layout); err != nil {
					t.Fatal(err)
				}
			}
			eachFP8Variant(t, func(t *testing.T) {
				var outs []*runtime.Tensor
				for _, n := range c.N {
					outs = append(outs, poisoned(t, runtime.BF16, 1, n))
				}
				ran, err := gb.NormMatMulNFP8(outs, gx, gnw, 1e-5, ws, ss, layout)
				if err != nil {
					t.Fatal(err)
				}
				if want := fp8NormFolds(c); ran != want {
					t.Fatalf("ran %v, want %v", ran, want)
				}
				if !ran {
					return
				}
				for i := range outs {
					compare(t, fmt.Sprintf("output %d", i), read(t, outs[i]), refs[i].F32(), 2e-3, 1e-2)
				}
			})
			gb.NoFP8FusedNorm = true
			defer func() { gb.NoFP8FusedNorm = false }()
			if ran, err := gb.NormMatMulNFP8([]*runtime.Tensor{poisoned(t, runtime.BF16, 1, c.N[0]), poisoned(t, runtime.BF16, 1, c.N[1]),
				poisoned(t, runtime.BF16, 1, c.N[2])}, gx, gnw, 1e-5, ws, ss, layout); ran || err != nil {
				t.Errorf("NoFP8FusedNorm: ran %v (%v), want a decline", ran, err)
			}
		})
	}
}

// TestNormGateUpSiLUFP8: gemv_gateup_silu_fp8_norm_mm2/mm4 against the
// CPU's RMSNorm then GateUpSiLUFP8, as TestNormMatMulNFP8.
func TestNormGateUpSiLUFP8(t *testing.T) {
	needGPU(t)
	cases := []fp8NormCase{
		{[3]int{14336}, 4096, 0, runtime.BF16, 4},
		{[3]int{14336}, 4096, 128, runtime.F32, 1e5},
		{[3]int{1001}, 528, 0, runtime.F32, 1},
		{[3]int{320}, 128, 64, runtime.BF16, 1},
		{[3]int{77}, 528, 16, runtime.F32, 1},
	}
	for _, c := range cases {
		layout := kernels.FP8Layout{Block: c.block}
		N := c.N[0]
		t.Run(fmt.Sprintf("%dx%d_%v_scale%v_x%g", N, c.D, layout, c.sdt, c.xs), func(t *testing.T) {
			gx, gnw, h := fp8NormInputs(t, c)
			rng := newRNG(t)
			wg := newFP8Weight(t, rng, N, c.D, layout, c.sdt)
			wu := newFP8Weight(t, rng, N, c.D, layout, c.sdt)
			ref, refUp := host(t, runtime.F32, nil, 1, N), host(t, runtime.F32, nil, 1, N)
			if err := cb.GateUpSiLUFP8(ref, refUp, h, wg.h, wu.h, wg.hs, wu.hs, layout); err != nil {
				t.Fatal(err)
			}
			eachFP8Variant(t, func(t *testing.T) {
				out := poisoned(t, runtime.BF16, 1, N)
				ran, err := gb.NormGateUpSiLUFP8(out, gx, gnw, 1e-5, wg.g, wu.g, wg.gs, wu.gs, layout)
				if err != nil {
					t.Fatal(err)
				}
				if want := fp8NormFolds(c); ran != want {
					t.Fatalf("ran %v, want %v", ran, want)
				}
				if ran {
					compare(t, "NormGateUpSiLUFP8", read(t, out), ref.F32(), 2e-3, 1e-2)
				}
			})
		})
	}
}

// TestFP8PersistBitIdentical: the persistent variants (mp2, mp4) give the
// bits of their block-a-tile twins (mm2, mm4): the same sums in the same
// order, over shapes where a block takes several tiles (more tiles than a
// wave) and a ragged last tile, for every kind, plain and with the norm
// folded, per channel and in 128-blocks.
func TestFP8PersistBitIdentical(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	defer func(was string) { gb.FP8Variant = was }(gb.FP8Variant)
	for _, c := range []struct {
		N     [3]int
		D     int
		block int
		sdt   runtime.DType
	}{
		{[3]int{12345, 1000, 1001}, 4096, 0, runtime.BF16},
		{[3]int{14336, 4096, 4096}, 4096, 128, runtime.F32},
		{[3]int{4099, 1024, 1024}, 8192, 0, runtime.BF16},
	} {
		layout := kernels.FP8Layout{Block: c.block}
		nc := fp8NormCase{N: c.N, D: c.D, block: c.block, sdt: c.sdt, xs: 4}
		gx, gnw, _ := fp8NormInputs(t, nc)
		xb := gpu(t, runtime.BF16, randBF16(rng, c.D, 2), 1, c.D)
		var ws, ss []*runtime.Tensor
		for _, n := range c.N {
			w := newFP8Weight(t, rng, n, c.D, layout, c.sdt)
			ws, ss = append(ws, w.g), append(ss, w.gs)
		}
		up := newFP8Weight(t, rng, c.N[0], c.D, layout, c.sdt)
		// run is every kind's output under variant name, as float32.
		run := func(t *testing.T, name string) map[string][]float32 {
			gb.FP8Variant = name
			got := map[string][]float32{}
			for _, od := range []runtime.DType{runtime.BF16, runtime.F32} {
				out := poisoned(t, od, 1, c.N[0])
				if err := gb.MatMulFP8(out, xb, ws[0], ss[0], layout); err != nil {
					t.Fatal(err)
				}
				got["gemv_v "+od.String()] = read(t, out)
			}
			outs := []*runtime.Tensor{poisoned(t, runtime.BF16, 1, c.N[0]), poisoned(t, runtime.BF16, 1, c.N[1]), poisoned(t, runtime.BF16, 1, c.N[2])}
			if err := gb.MatMulNFP8(outs, xb, ws, ss, layout); err != nil {
				t.Fatal(err)
			}
			for i, o := range outs {
				got[fmt.Sprintf("qkv %d", i)] = read(t, o)
			}
			if ran, err := gb.NormMatMulNFP8(outs, gx, gnw, 1e-5, ws, ss, layout); err != nil || !ran {
				t.Fatalf("NormMatMulNFP8 under %s: ran %v, %v", name, ran, err)
			}
			for i, o := range outs {
				got[fmt.Sprintf("qkv normed %d", i)] = read(t, o)
			}
			act, u := poisoned(t, runtime.BF16, 1, c.N[0]), poisoned(t, runtime.BF16, 1, c.N[0])
			if err := gb.GateUpSiLUFP8(act, u, xb, ws[0], up.g, ss[0], up.gs, layout); err != nil {
				t.Fatal(err)
			}
			got["gateup"] = read(t, act)
			if ran, err := gb.NormGateUpSiLUFP8(act, gx, gnw, 1e-5, ws[0], up.g, ss[0], up.gs, layout); err != nil || !ran {
				t.Fatalf("NormGateUpSiLUFP8 under %s: ran %v, %v", name, ran, err)
			}
			got["gateup normed"] = read(t, act)
			return got
		}
		for _, pair := range [][2]string{{"mp2", "mm2"}, {"mp4", "mm4"}} {
			t.Run(fmt.Sprintf("%v_%d_%v_%s", c.N, c.D, layout, pair[0]), func(t *testing.T) {
				if !fp8PersistTakes(fp8PersistNB[pair[0]].NB, c.D) {
					t.Fatalf("%s does not take K %d: the case checks nothing", pair[0], c.D)
				}
				got, want := run(t, pair[0]), run(t, pair[1])
				for k, w := range want {
					g := got[k]
					for i := range w {
						if math.Float32bits(g[i]) != math.Float32bits(w[i]) {
							t.Errorf("%s row %d: %s %v, %s %v", k, i, pair[0], g[i], pair[1], w[i])
							break
						}
					}
				}
			})
		}
	}
}
