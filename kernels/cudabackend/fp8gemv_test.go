//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// fp8Weight is a random FP8 weight [N,D] with scales (dtype sdt) on the GPU
// and its copy on the host.
type fp8Weight struct {
	g, h   *runtime.Tensor // codes
	gs, hs *runtime.Tensor // scales
	q      []byte
	s      []float32 // the scales as float32 (exactly what the tensors hold)
}

func newFP8Weight(t *testing.T, rng *rand.Rand, N, D int, layout kernels.FP8Layout, sdt runtime.DType) fp8Weight {
	t.Helper()
	q := randFP8(rng, N*D)
	ss := layout.ScaleShape(N, D)
	sv := make([]float32, ss.NumElements())
	for i := range sv {
		// codes reach ±448: scales of about 1/(448·√D) give weights of
		// about 1/√D.
		sv[i] = runtime.BF16ToF32(runtime.F32ToBF16(float32((0.5 + rng.Float64()) / (448 * math.Sqrt(float64(D))))))
	}
	var sbytes []byte
	if sdt == runtime.F32 {
		sbytes = f32Bytes(sv)
	} else {
		sbytes = bf16Bytes(sv)
	}
	g, h := rawTensors(t, runtime.F8E4M3, q, N, D)
	gs, hs := nanTailed(t, sdt, sbytes, ss...), host(t, sdt, sv, ss...)
	return fp8Weight{g: g, h: h, gs: gs, hs: hs, q: q, s: sv}
}

// nanTailed is a GPU tensor of dtype dt (F32 or BF16) and shape holding
// data, the first rows of an allocation one row longer whose last row is
// NaN: a kernel that reads a scale past a matrix's last (as the
// tensor-core GEMVs did for a zero piece past K, s26f) meets NaN every run,
// not whatever memory follows.
func nanTailed(t *testing.T, dt runtime.DType, data []byte, shape ...int) *runtime.Tensor {
	t.Helper()
	padded := append([]int{shape[0] + 1}, shape[1:]...)
	full := gpu(t, dt, nil, padded...)
	if err := gb.Fill16(full, 0x7fc0); err != nil { // bf16 NaN; as F32 0x7fc07fc0, NaN too
		t.Fatal(err)
	}
	v, err := full.Slice(0, shape[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := gb.WriteBytes(v, data); err != nil {
		t.Fatal(err)
	}
	return v
}

// fp8Ref is the CPU reference x[1,D]·dequant(w)ᵀ in float32.
func fp8Ref(t *testing.T, x []float32, w fp8Weight, layout kernels.FP8Layout) []float32 {
	t.Helper()
	N, D := w.h.Dim(0), w.h.Dim(1)
	ref := host(t, runtime.F32, nil, 1, N)
	if err := cb.MatMulFP8(ref, host(t, runtime.F32, x, 1, D), w.h, w.hs, layout); err != nil {
		t.Fatal(err)
	}
	return ref.F32()
}

// mustFast fails t unless the fp8gemv.cu kernels (the kernel of kind f in
// the variant gb runs for it at width D) take this shape (so that the test
// checks them, not a fallback).
func mustFast(t *testing.T, f fp8Kind, D int, layout kernels.FP8Layout, rows int, ptrs ...uintptr) {
	t.Helper()
	if _, ok := gb.fp8Fast(D, layout, ptrs...); !ok {
		t.Fatalf("the fp8gemv.cu kernels do not take D %d, %v", D, layout)
	}
	v := gb.fp8GEMVs(f, D, layout.Block)
	if _, _, ok, err := gb.k.fp8.fp8Grid(v, v.fn(f), rows, D); err != nil || !ok {
		t.Fatalf("%s: no grid for %d rows of %d (%v)", v.fn(f).Name(), rows, D, err)
	}
}

// eachFP8Variant runs fn as a subtest per FT_FP8_VARIANT value
// (FP8VariantNames: "auto", the variant per launch, then every compiled
// variant), with gb running it.
func eachFP8Variant(t *testing.T, fn func(t *testing.T)) {
	t.Helper()
	for _, name := range FP8VariantNames() {
		t.Run(name, func(t *testing.T) {
			defer func(was string) { gb.FP8Variant = was }(gb.FP8Variant)
			gb.FP8Variant = name
			fn(t)
		})
	}
}

// The kinds of FP8 GEMV the tests check.
const (
	fp8Gemv   = fp8KindGEMV
	fp8Gemv3  = fp8KindQKV
	fp8GateUp = fp8KindGateUp
)

// fp8Cases are the shapes of the GEMV tests: Llama-3-8B's projections and
// odd ones (D not a multiple of 16·32, N not a multiple of 8 rows per
// block, partial edge blocks), per channel and per block.
var fp8Cases = []struct {
	N, D, block int
	sdt         runtime.DType
}{
	{4096, 4096, 0, runtime.BF16},    // q / o, per channel
	{1024, 4096, 128, runtime.F32},   // k / v, 128-blocks
	{4096, 14336, 0, runtime.BF16},   // down: x takes 56 KiB of shared memory
	{4096, 14336, 128, runtime.F32},  // down, 128-blocks
	{14336, 4096, 128, runtime.F32},  // gate / up
	{1001, 528, 0, runtime.F32},      // 528 = 33·16: a partial last batch of loads
	{1000, 320, 64, runtime.F32},     // partial edge blocks (1000 = 15·64 + 40, 320 = 5·64)
	{77, 16, 16, runtime.BF16},       // one chunk per row, 16-blocks
	{333, 1040, 32, runtime.BF16},    // 1040 = 32·32 + 16
	{130, 12304, 256, runtime.F32},   // 12304 = 48·256 + 16: a partial edge block of 16 columns
	{5, 4096 + 16, 0, runtime.BF16},  // fewer rows than warps
	{3, 128, 128, runtime.BF16},      // one block
	{129, 512 + 48, 16, runtime.F32}, // 16-blocks, 35 chunks
}

// TestFP8GEMVv: gemv_fp8_v (MatMulFP8 at one token) of every variant
// against the CPU reference, BF16 and F32 outputs, both layouts.
func TestFP8GEMVv(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range fp8Cases {
		layout := kernels.FP8Layout{Block: c.block}
		t.Run(fmt.Sprintf("%dx%d_%v_scale%v", c.N, c.D, layout, c.sdt), func(t *testing.T) {
			w := newFP8Weight(t, rng, c.N, c.D, layout, c.sdt)
			x := randBF16(rng, c.D, 1)
			gx := gpu(t, runtime.BF16, x, 1, c.D)
			ref := fp8Ref(t, x, w, layout)
			eachFP8Variant(t, func(t *testing.T) {
				mustFast(t, fp8Gemv, c.D, layout, c.N, gx.Ptr(), w.g.Ptr())
				for _, od := range []runtime.DType{runtime.BF16, runtime.F32} {
					out := poisoned(t, od, 1, c.N)
					if err := gb.MatMulFP8(out, gx, w.g, w.gs, layout); err != nil {
						t.Fatal(err)
					}
					atol, rtol := 2e-4, 1e-4
					if od == runtime.BF16 {
						atol, rtol = 1e-3, 8e-3
					}
					compare(t, fmt.Sprintf("gemv_fp8_v %v out", od), read(t, out), ref, atol, rtol)
				}
			})
		})
	}
}

// TestMatMulNFP8: gemv3_fp8 (q, k and v in one launch) of every variant
// against the CPU reference, both layouts, real and odd shapes (odd row
// counts: a two-row group straddles two matrices); and the per-weight
// fallback for a width the kernel does not take.
func TestMatMulNFP8(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct {
		N     [3]int
		D     int
		block int
		sdt   runtime.DType
		fused bool
	}{
		{[3]int{4096, 1024, 1024}, 4096, 0, runtime.BF16, true},  // Llama-3-8B, per channel
		{[3]int{4096, 1024, 1024}, 4096, 128, runtime.F32, true}, // 128-blocks
		{[3]int{100, 37, 37}, 528, 0, runtime.F32, true},         // odd
		{[3]int{130, 66, 65}, 320, 64, runtime.BF16, true},       // partial edge blocks
		{[3]int{7, 3, 5}, 4096, 0, runtime.BF16, true},           // odd counts, fewer rows than warps
		{[3]int{64, 32, 32}, 100, 0, runtime.F32, false},         // D % 16 != 0: three MatMulFP8s
		{[3]int{64, 32, 32}, 96, 48, runtime.F32, false},         // block not a power of two
	} {
		layout := kernels.FP8Layout{Block: c.block}
		t.Run(fmt.Sprintf("%v_%d_%v_scale%v", c.N, c.D, layout, c.sdt), func(t *testing.T) {
			x := randBF16(rng, c.D, 1)
			gx := gpu(t, runtime.BF16, x, 1, c.D)
			var ws, ss []*runtime.Tensor
			var w3 [3]fp8Weight
			var refs [3][]float32
			for i, n := range c.N {
				w3[i] = newFP8Weight(t, rng, n, c.D, layout, c.sdt)
				ws, ss = append(ws, w3[i].g), append(ss, w3[i].gs)
				refs[i] = fp8Ref(t, x, w3[i], layout)
			}
			eachFP8Variant(t, func(t *testing.T) {
				if c.fused {
					mustFast(t, fp8Gemv3, c.D, layout, c.N[0]+c.N[1]+c.N[2], gx.Ptr(), ws[0].Ptr(), ws[1].Ptr(), ws[2].Ptr())
				}
				var outs []*runtime.Tensor
				for _, n := range c.N {
					outs = append(outs, poisoned(t, runtime.BF16, 1, n))
				}
				if err := gb.MatMulNFP8(outs, gx, ws, ss, layout); err != nil {
					t.Fatal(err)
				}
				for i := range outs {
					compare(t, fmt.Sprintf("output %d", i), read(t, outs[i]), refs[i], 1e-3, 8e-3)
				}
			})
		})
	}
}

// TestGateUpSiLUFP8: gemv_gateup_silu_fp8 of every variant against the CPU reference
// (kernels.CPUBackend.GateUpSiLUFP8: gate, up, SiLUMul in float32), both
// layouts, Llama-3-8B's and odd shapes, and the unfused fallback.
func TestGateUpSiLUFP8(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct {
		N, D, block int
		sdt         runtime.DType
		fused       bool
	}{
		{14336, 4096, 0, runtime.BF16, true},
		{14336, 4096, 128, runtime.F32, true},
		{1001, 528, 0, runtime.F32, true},
		{320, 128, 64, runtime.BF16, true}, // the tiny fixtures' MLP
		{1000, 320, 64, runtime.F32, true},
		{77, 528, 16, runtime.F32, true}, // an odd row count: the last two-row group has one row
		{100, 40, 0, runtime.F32, false}, // D % 16 != 0: gate, up, SiLUMul
	} {
		layout := kernels.FP8Layout{Block: c.block}
		t.Run(fmt.Sprintf("%dx%d_%v_scale%v", c.N, c.D, layout, c.sdt), func(t *testing.T) {
			// gate and up of about unit size: SiLU away from its linear part.
			x := randBF16(rng, c.D, 2)
			gx := gpu(t, runtime.BF16, x, 1, c.D)
			wg := newFP8Weight(t, rng, c.N, c.D, layout, c.sdt)
			wu := newFP8Weight(t, rng, c.N, c.D, layout, c.sdt)
			ref, refUp := host(t, runtime.F32, nil, 1, c.N), host(t, runtime.F32, nil, 1, c.N)
			if err := cb.GateUpSiLUFP8(ref, refUp, host(t, runtime.F32, x, 1, c.D), wg.h, wu.h, wg.hs, wu.hs, layout); err != nil {
				t.Fatal(err)
			}
			// the unfused path rounds gate and up to bf16 before SiLUMul
			atol, rtol := 1e-3, 8e-3
			if !c.fused {
				atol, rtol = 3e-3, 2e-2
			}
			eachFP8Variant(t, func(t *testing.T) {
				if c.fused {
					mustFast(t, fp8GateUp, c.D, layout, c.N, gx.Ptr(), wg.g.Ptr(), wu.g.Ptr())
				}
				out, up := poisoned(t, runtime.BF16, 1, c.N), poisoned(t, runtime.BF16, 1, c.N)
				if err := gb.GateUpSiLUFP8(out, up, gx, wg.g, wu.g, wg.gs, wu.gs, layout); err != nil {
					t.Fatal(err)
				}
				compare(t, "GateUpSiLUFP8", read(t, out), ref.F32(), atol, rtol)
			})
		})
	}
}

// TestDequantFP8: dequant_fp8_bf16_v16 (and dequant_fp8_bf16 for the
// shapes it leaves) against bf16(q·s) computed on the host: exactly equal.
func TestDequantFP8(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct {
		N, D, block int
		sdt         runtime.DType
	}{
		{1024, 4096, 0, runtime.BF16},
		{1024, 4096, 128, runtime.F32},
		{1000, 320, 64, runtime.F32}, // partial edge blocks
		{77, 528, 48, runtime.BF16},  // a block multiple of 16, not a power of two
		{33, 100, 0, runtime.F32},    // D % 16 != 0: dequant_fp8_bf16
		{40, 64, 8, runtime.F32},     // block % 16 != 0: dequant_fp8_bf16
	} {
		layout := kernels.FP8Layout{Block: c.block}
		for _, legacy := range []bool{false, true} {
			t.Run(fmt.Sprintf("%dx%d_%v_scale%v_legacy%v", c.N, c.D, layout, c.sdt, legacy), func(t *testing.T) {
				w := newFP8Weight(t, rng, c.N, c.D, layout, c.sdt)
				dst := poisoned(t, runtime.BF16, c.N, c.D)
				gb.LegacyFP8GEMV = legacy
				defer func() { gb.LegacyFP8GEMV = false }()
				if err := gb.dequantFP8(dst.Ptr(), w.g, w.gs, layout); err != nil {
					t.Fatal(err)
				}
				want := make([]float32, c.N*c.D)
				sstride := 0
				if c.block > 0 {
					sstride = (c.D + c.block - 1) / c.block
				}
				for n := range c.N {
					for k := range c.D {
						var s float32
						if c.block > 0 {
							s = w.s[(n/c.block)*sstride+k/c.block]
						} else {
							s = w.s[n]
						}
						want[n*c.D+k] = runtime.BF16ToF32(runtime.F32ToBF16(runtime.F8E4M3ToF32(w.q[n*c.D+k]) * s))
					}
				}
				compare(t, "dequant", read(t, dst), want, 0, 0)
			})
		}
	}
}

// TestFP8Legacy: with LegacyFP8GEMV the fp8gemv.cu kernels are not chosen
// and the fp8.cu ones still agree with the CPU reference.
func TestFP8Legacy(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	gb.LegacyFP8GEMV = true
	defer func() { gb.LegacyFP8GEMV = false }()
	D, layout := 4096, kernels.FP8Layout{Block: 128}
	x := randBF16(rng, D, 1)
	gx := gpu(t, runtime.BF16, x, 1, D)
	w := newFP8Weight(t, rng, 1024, D, layout, runtime.F32)
	if _, ok := gb.fp8Fast(D, layout, gx.Ptr(), w.g.Ptr()); ok {
		t.Fatal("LegacyFP8GEMV set, but the fp8gemv.cu kernels take the shape")
	}
	out, up := poisoned(t, runtime.BF16, 1, 1024), poisoned(t, runtime.BF16, 1, 1024)
	outs := []*runtime.Tensor{out, poisoned(t, runtime.BF16, 1, 1024), poisoned(t, runtime.BF16, 1, 1024)}
	if err := gb.MatMulNFP8(outs, gx, []*runtime.Tensor{w.g, w.g, w.g}, []*runtime.Tensor{w.gs, w.gs, w.gs}, layout); err != nil {
		t.Fatal(err)
	}
	ref := fp8Ref(t, x, w, layout)
	for i := range outs {
		compare(t, fmt.Sprintf("legacy output %d", i), read(t, outs[i]), ref, 1e-3, 8e-3)
	}
	if err := gb.GateUpSiLUFP8(out, up, gx, w.g, w.g, w.gs, w.gs, layout); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, len(ref))
	for i, g := range ref {
		gb16 := float64(runtime.BF16ToF32(runtime.F32ToBF16(g)))
		want[i] = float32(gb16 / (1 + math.Exp(-gb16)) * gb16)
	}
	compare(t, "legacy gate·up·SiLU", read(t, out), want, 3e-3, 2e-2)
}

// TestFP8GEMVBandwidth prints the achieved bandwidth of the legacy FP8
// GEMV and of every variant of the new one on Llama-3-8B's projections (a
// report, run with -v; it fails only if a launch does).
func TestFP8GEMVBandwidth(t *testing.T) {
	needGPU(t)
	if testing.Short() {
		t.Skip("bandwidth report")
	}
	rng := newRNG(t)
	const iters = 50
	defer func() { gb.LegacyFP8GEMV, gb.FP8Variant = false, fp8DefaultVariant }()
	for _, block := range []int{0, 128} {
		layout := kernels.FP8Layout{Block: block}
		for _, s := range []struct {
			name string
			N, D int
		}{{"q/o", 4096, 4096}, {"k/v", 1024, 4096}, {"gate/up", 14336, 4096}, {"down", 4096, 14336}} {
			w := newFP8Weight(t, rng, s.N, s.D, layout, runtime.F32)
			gx := gpu(t, runtime.BF16, randBF16(rng, s.D, 1), 1, s.D)
			out := gpu(t, runtime.BF16, nil, 1, s.N)
			for _, cfg := range append([]string{"legacy"}, FP8VariantNames()...) {
				gb.LegacyFP8GEMV, gb.FP8Variant = cfg == "legacy", cfg
				run := func() {
					if err := gb.MatMulFP8(out, gx, w.g, w.gs, layout); err != nil {
						t.Fatal(err)
					}
				}
				run()
				if err := gb.s.Synchronize(); err != nil {
					t.Fatal(err)
				}
				t0 := time.Now()
				for range iters {
					run()
				}
				if err := gb.s.Synchronize(); err != nil {
					t.Fatal(err)
				}
				dt := time.Since(t0).Seconds() / iters
				t.Logf("%-8s %v %5dx%-5d %-7s %7.1f µs %6.0f GB/s of FP8 weights", s.name, layout, s.N, s.D, cfg, dt*1e6, float64(s.N*s.D)/dt/1e9)
			}
		}
	}
}
