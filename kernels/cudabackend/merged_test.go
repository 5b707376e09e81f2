//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// packedWeights puts weights of rows ns and d columns back to back in one
// GPU buffer and returns their views and values.
func packedWeights(t *testing.T, vals []float32, ns []int, d int) []*runtime.Tensor {
	t.Helper()
	total := 0
	for _, n := range ns {
		total += n
	}
	all := gpu(t, runtime.BF16, vals, total, d)
	var ws []*runtime.Tensor
	off := all.Offset()
	for _, n := range ns {
		w, err := runtime.TensorOn(all.Buffer(), off, runtime.BF16, runtime.Shape{n, d})
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
		off += w.NumBytes()
	}
	return ws
}

// mergedTol is how far a merged GEMM's outputs may be from the separate
// GEMMs': cuBLASLt picks its algorithm per shape, so [T,ΣN] may sum in
// another order (another tile, split-K) than [T,N_i]; both accumulate in
// fp32 and round to bf16 once, so they differ by about one bf16 rounding
// (2⁻⁸ relative) of outputs of size ~1 — 1e-2 absolute plus 1e-2
// relative. Against the CPU's fp32 reference (then bf16 rounded) alike.
const mergedTol = 1e-2

// TestMatMulMergedGPU: q, k, v packed back to back run as one GEMM plus a
// column split (vectorised and scalar split), matching the separate GPU
// MatMuls and the CPU reference within mergedTol, at 2, 64 and 256 tokens;
// weights in separate buffers, or with NoMergedGEMM (FT_MERGED_GEMM=0),
// are not taken (ran false, the outputs untouched).
func TestMatMulMergedGPU(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct {
		T, D int
		ns   []int
	}{
		{2, 512, []int{512, 128, 128}},
		{64, 4096, []int{4096, 1024, 1024}}, // Llama-3-8B's q, k, v at batch 64
		{256, 256, []int{256, 64, 64}},
		{5, 64, []int{36, 12, 12}}, // N % 8 != 0: the scalar split
		{3, 128, []int{256, 256}},  // two weights
	} {
		t.Run(fmt.Sprintf("T%d/D%d/N%v", c.T, c.D, c.ns), func(t *testing.T) {
			total := 0
			for _, n := range c.ns {
				total += n
			}
			x := randBF16(rng, c.T*c.D, 1)
			wv := randBF16(rng, total*c.D, float32(1/math.Sqrt(float64(c.D))))
			gx := gpu(t, runtime.BF16, x, c.T, c.D)
			ws := packedWeights(t, wv, c.ns, c.D)
			var outs, sep []*runtime.Tensor
			for _, n := range c.ns {
				outs = append(outs, poisoned(t, runtime.BF16, c.T, n))
				sep = append(sep, poisoned(t, runtime.BF16, c.T, n))
			}
			ran, err := gb.MatMulMerged(outs, gx, ws)
			if err != nil || !ran {
				t.Fatalf("adjacent weights: ran %v, error %v", ran, err)
			}
			row := 0
			for i, n := range c.ns {
				if err := gb.MatMul(sep[i], gx, ws[i]); err != nil {
					t.Fatal(err)
				}
				ref := host(t, runtime.F32, nil, c.T, n)
				if err := cb.MatMul(ref, host(t, runtime.F32, x, c.T, c.D), host(t, runtime.BF16, wv[row*c.D:(row+n)*c.D], n, c.D)); err != nil {
					t.Fatal(err)
				}
				row += n
				got := read(t, outs[i])
				compare(t, fmt.Sprintf("output %d against the separate GEMM", i), got, read(t, sep[i]), mergedTol, mergedTol)
				compare(t, fmt.Sprintf("output %d against the CPU", i), got, ref.F32(), mergedTol, mergedTol)
			}

			// Not adjacent: the same weights in buffers of their own.
			var apart []*runtime.Tensor
			row = 0
			for _, n := range c.ns {
				apart = append(apart, gpu(t, runtime.BF16, wv[row*c.D:(row+n)*c.D], n, c.D))
				row += n
			}
			untouched := poisoned(t, runtime.BF16, c.T, c.ns[0])
			outs[0] = untouched
			if ran, err := gb.MatMulMerged(outs, gx, apart); ran || err != nil {
				t.Errorf("weights apart: ran %v, error %v; want not taken", ran, err)
			}
			gb.NoMergedGEMM = true
			ran, err = gb.MatMulMerged(outs, gx, ws)
			gb.NoMergedGEMM = false
			if ran || err != nil {
				t.Errorf("NoMergedGEMM: ran %v, error %v; want not taken", ran, err)
			}
			for i, v := range read(t, untouched) {
				if !math.IsNaN(float64(v)) {
					t.Fatalf("a call not taken wrote output element %d", i)
				}
			}
		})
	}
	x := gpu(t, runtime.BF16, make([]float32, 2*64), 2, 64)
	ws := packedWeights(t, make([]float32, 32*64), []int{16, 16}, 64)
	if _, err := gb.MatMulMerged([]*runtime.Tensor{poisoned(t, runtime.BF16, 2, 16)}, x, ws); err == nil {
		t.Error("one output for two weights: no error")
	}
	if _, err := gb.MatMulMerged([]*runtime.Tensor{poisoned(t, runtime.BF16, 2, 16), poisoned(t, runtime.BF16, 3, 16)}, x, ws); err == nil {
		t.Error("an output of the wrong size: no error")
	}
}

// TestGateUpSiLUMergedGPU: gate and up packed back to back run as one GEMM
// and one silu·mul over its halves, matching GPU MatMul, MatMul, SiLUMul and
// the CPU reference within mergedTol (plus a bf16 rounding of silu's
// input); apart or switched off, not taken.
func TestGateUpSiLUMergedGPU(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct{ T, D, I int }{
		{64, 4096, 14336}, // Llama-3-8B at batch 64
		{2, 256, 512},
		{256, 128, 384},
		{4, 64, 20}, // I % 8 != 0: the scalar kernel
	} {
		t.Run(fmt.Sprintf("T%d/D%d/I%d", c.T, c.D, c.I), func(t *testing.T) {
			x := randBF16(rng, c.T*c.D, 1)
			wv := randBF16(rng, 2*c.I*c.D, float32(2/math.Sqrt(float64(c.D))))
			gx := gpu(t, runtime.BF16, x, c.T, c.D)
			ws := packedWeights(t, wv, []int{c.I, c.I}, c.D)
			out := poisoned(t, runtime.BF16, c.T, c.I)
			ran, err := gb.GateUpSiLUMerged(out, gx, ws[0], ws[1])
			if err != nil || !ran {
				t.Fatalf("adjacent weights: ran %v, error %v", ran, err)
			}
			g, u := poisoned(t, runtime.BF16, c.T, c.I), poisoned(t, runtime.BF16, c.T, c.I)
			if err := gb.MatMul(g, gx, ws[0]); err != nil {
				t.Fatal(err)
			}
			if err := gb.MatMul(u, gx, ws[1]); err != nil {
				t.Fatal(err)
			}
			if err := gb.SiLUMul(g, g, u); err != nil {
				t.Fatal(err)
			}
			got := read(t, out)
			compare(t, "against GEMM, GEMM, SiLUMul", got, read(t, g), 2*mergedTol, mergedTol)
			hx := host(t, runtime.F32, x, c.T, c.D)
			rg, ru := host(t, runtime.F32, nil, c.T, c.I), host(t, runtime.F32, nil, c.T, c.I)
			if err := cb.MatMul(rg, hx, host(t, runtime.BF16, wv[:c.I*c.D], c.I, c.D)); err != nil {
				t.Fatal(err)
			}
			if err := cb.MatMul(ru, hx, host(t, runtime.BF16, wv[c.I*c.D:], c.I, c.D)); err != nil {
				t.Fatal(err)
			}
			if err := cb.SiLUMul(rg, rg, ru); err != nil {
				t.Fatal(err)
			}
			compare(t, "against the CPU", got, rg.F32(), 2*mergedTol, mergedTol)

			untouched := poisoned(t, runtime.BF16, c.T, c.I)
			apart := []*runtime.Tensor{gpu(t, runtime.BF16, wv[:c.I*c.D], c.I, c.D), gpu(t, runtime.BF16, wv[c.I*c.D:], c.I, c.D)}
			if ran, err := gb.GateUpSiLUMerged(untouched, gx, apart[0], apart[1]); ran || err != nil {
				t.Errorf("weights apart: ran %v, error %v; want not taken", ran, err)
			}
			gb.NoMergedGEMM = true
			ran, err = gb.GateUpSiLUMerged(untouched, gx, ws[0], ws[1])
			gb.NoMergedGEMM = false
			if ran || err != nil {
				t.Errorf("NoMergedGEMM: ran %v, error %v; want not taken", ran, err)
			}
			for i, v := range read(t, untouched) {
				if !math.IsNaN(float64(v)) {
					t.Fatalf("a call not taken wrote output element %d", i)
				}
			}
		})
	}
}
