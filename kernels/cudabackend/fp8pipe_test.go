//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// pipeFP8Variants are the software-pipelined FP8 variants (names ending
// in "p", fp8gemv_pipe.cu) with the variant whose bits they must give.
func pipeFP8Variants(t *testing.T) [][2]string {
	t.Helper()
	var out [][2]string
	for _, v := range fp8Variants {
		if base, ok := strings.CutSuffix(v.Name, "p"); ok {
			if _, has := gb.k.fp8.variants[base]; !has {
				t.Fatalf("pipelined variant %s has no twin %s", v.Name, base)
			}
			out = append(out, [2]string{v.Name, base})
		}
	}
	if len(out) == 0 {
		t.Fatal("no pipelined FP8 variants")
	}
	return out
}

// TestFP8PipeBitIdentical: the pipelined FP8 GEMVs (u<U>r1sp) leave bit
// for bit what their unpipelined twins (u<U>r1s) leave: gemv_fp8_v (BF16
// and F32 outputs), gemv3_fp8 and gemv_gateup_silu_fp8 on Llama-3-8B's
// decode shapes and odd ones (partial last batches, one chunk a row, fewer
// rows than warps), per channel and per block.
func TestFP8PipeBitIdentical(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	defer func() { gb.FP8Variant = fp8DefaultVariant }()
	pairs := pipeFP8Variants(t)
	// run leaves the outputs of fn under each variant of a pair and checks
	// they match bit for bit.
	run := func(t *testing.T, what string, fn func() []*runtime.Tensor) {
		t.Helper()
		for _, p := range pairs {
			var got [2][][]float32
			for i, name := range p {
				gb.FP8Variant = name
				for _, o := range fn() {
					got[i] = append(got[i], read(t, o))
				}
			}
			for j := range got[0] {
				for k, v := range got[0][j] {
					if math.IsNaN(float64(v)) { // poisoned: not written
						t.Fatalf("%s output %d: %s left element %d unwritten", what, j, p[0], k)
					}
				}
				if k := sameBits(got[0][j], got[1][j]); k >= 0 {
					t.Errorf("%s output %d: %s differs from %s at %d (%v against %v)", what, j, p[0], p[1], k, got[0][j][k], got[1][j][k])
				}
			}
		}
	}
	for _, c := range []struct {
		N, D, block int
		sdt         runtime.DType
	}{
		{4096, 14336, 0, runtime.BF16},  // down
		{4096, 4096, 128, runtime.F32},  // o, 128-blocks
		{1001, 528, 0, runtime.F32},     // a partial last batch
		{77, 16, 16, runtime.BF16},      // one chunk a row
		{5, 4096 + 16, 0, runtime.BF16}, // fewer rows than warps
		{333, 1040, 32, runtime.BF16},
	} {
		layout := kernels.FP8Layout{Block: c.block}
		t.Run(fmt.Sprintf("gemv_%dx%d_%v", c.N, c.D, layout), func(t *testing.T) {
			w := newFP8Weight(t, rng, c.N, c.D, layout, c.sdt)
			gx := gpu(t, runtime.BF16, randBF16(rng, c.D, 1), 1, c.D)
			for _, od := range []runtime.DType{runtime.BF16, runtime.F32} {
				run(t, fmt.Sprintf("MatMulFP8 %v", od), func() []*runtime.Tensor {
					mustFast(t, fp8Gemv, c.D, layout, c.N, gx.Ptr(), w.g.Ptr())
					out := poisoned(t, od, 1, c.N)
					if err := gb.MatMulFP8(out, gx, w.g, w.gs, layout); err != nil {
						t.Fatal(err)
					}
					return []*runtime.Tensor{out}
				})
			}
		})
	}
	for _, c := range []struct {
		N     [3]int
		D     int
		block int
	}{
		{[3]int{4096, 1024, 1024}, 4096, 0},
		{[3]int{4096, 1024, 1024}, 4096, 128},
		{[3]int{100, 37, 37}, 528, 0},
		{[3]int{7, 3, 5}, 4096, 0},
	} {
		layout := kernels.FP8Layout{Block: c.block}
		t.Run(fmt.Sprintf("gemv3_%v_%d_%v", c.N, c.D, layout), func(t *testing.T) {
			gx := gpu(t, runtime.BF16, randBF16(rng, c.D, 1), 1, c.D)
			var ws, ss []*runtime.Tensor
			for _, n := range c.N {
				w := newFP8Weight(t, rng, n, c.D, layout, runtime.F32)
				ws, ss = append(ws, w.g), append(ss, w.gs)
			}
			run(t, "MatMulNFP8", func() []*runtime.Tensor {
				mustFast(t, fp8Gemv3, c.D, layout, c.N[0]+c.N[1]+c.N[2], gx.Ptr(), ws[0].Ptr(), ws[1].Ptr(), ws[2].Ptr())
				var outs []*runtime.Tensor
				for _, n := range c.N {
					outs = append(outs, poisoned(t, runtime.BF16, 1, n))
				}
				if err := gb.MatMulNFP8(outs, gx, ws, ss, layout); err != nil {
					t.Fatal(err)
				}
				return outs
			})
		})
	}
	for _, c := range []struct{ N, D, block int }{{14336, 4096, 0}, {14336, 4096, 128}, {1001, 528, 0}, {77, 528, 16}} {
		layout := kernels.FP8Layout{Block: c.block}
		t.Run(fmt.Sprintf("gateup_%dx%d_%v", c.N, c.D, layout), func(t *testing.T) {
			gx := gpu(t, runtime.BF16, randBF16(rng, c.D, 2), 1, c.D)
			wg := newFP8Weight(t, rng, c.N, c.D, layout, runtime.BF16)
			wu := newFP8Weight(t, rng, c.N, c.D, layout, runtime.BF16)
			run(t, "GateUpSiLUFP8", func() []*runtime.Tensor {
				mustFast(t, fp8GateUp, c.D, layout, c.N, gx.Ptr(), wg.g.Ptr(), wu.g.Ptr())
				out, up := poisoned(t, runtime.BF16, 1, c.N), poisoned(t, runtime.BF16, 1, c.N)
				if err := gb.GateUpSiLUFP8(out, up, gx, wg.g, wu.g, wg.gs, wu.gs, layout); err != nil {
					t.Fatal(err)
				}
				return []*runtime.Tensor{out}
			})
		})
	}
}
