//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// fp8SameBits fails t unless got and want are the same float32 bit patterns.
func fp8SameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	bad := 0
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			if bad < 3 {
				t.Errorf("%s: y[%d] = %v, want %v (GEMV into F32, then Add)", what, i, got[i], want[i])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values differ", what, bad, len(want))
	}
}

// fp8AddCheck runs MatMulAddFP8 on y (random F32 start values, T rows) and
// checks it against MatMulFP8 into F32 then Add on the GPU (bit for bit
// where exact, else within the GPU-vs-CPU tolerance) and against y + the
// CPU reference product (atol, rtol).
func fp8AddCheck(t *testing.T, T int, x []float32, w fp8Weight, layout kernels.FP8Layout, exact bool, atol, rtol float64) {
	t.Helper()
	N, D := w.h.Dim(0), w.h.Dim(1)
	rng := newRNG(t)
	y0 := randBF16(rng, T*N, 2)
	gx := gpu(t, runtime.BF16, x, T, D)
	y := gpu(t, runtime.F32, y0, T, N)
	if err := gb.MatMulAddFP8(y, gx, w.g, w.gs, layout); err != nil {
		t.Fatal(err)
	}
	got := read(t, y)

	yb, prod := gpu(t, runtime.F32, y0, T, N), poisoned(t, runtime.F32, T, N)
	if err := gb.MatMulFP8(prod, gx, w.g, w.gs, layout); err != nil {
		t.Fatal(err)
	}
	if err := gb.Add(yb, yb, prod); err != nil {
		t.Fatal(err)
	}
	if exact {
		fp8SameBits(t, "MatMulAddFP8", got, read(t, yb))
	} else {
		compare(t, "MatMulAddFP8 vs MatMulFP8 + Add", got, read(t, yb), atol, rtol)
	}

	ref := host(t, runtime.F32, y0, T, N)
	if err := cb.MatMulAddFP8(ref, host(t, runtime.F32, x, T, D), w.h, w.hs, layout); err != nil {
		t.Fatal(err)
	}
	compare(t, "MatMulAddFP8 vs the CPU reference", got, ref.F32(), atol, rtol)
}

// TestMatMulAddFP8GEMV: the adding one-token FP8 GEMV (gemv_fp8_v's out
// mode 2) of every variant equals gemv_fp8_v into F32 followed by Add
// bit for bit, and y + the CPU reference within the F32 GEMV tolerance, on
// fp8Cases' shapes (Llama-3-8B's o and down, odd sizes, partial edge
// blocks, F32 and BF16 scales).
func TestMatMulAddFP8GEMV(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range fp8Cases {
		layout := kernels.FP8Layout{Block: c.block}
		t.Run(fmt.Sprintf("%dx%d_%v_scale%v", c.N, c.D, layout, c.sdt), func(t *testing.T) {
			w := newFP8Weight(t, rng, c.N, c.D, layout, c.sdt)
			x := randBF16(rng, c.D, 1)
			eachFP8Variant(t, func(t *testing.T) {
				gx := gpu(t, runtime.BF16, x, 1, c.D)
				mustFast(t, fp8Gemv, c.D, layout, c.N, gx.Ptr(), w.g.Ptr())
				fp8AddCheck(t, 1, x, w, layout, true, 2e-4, 1e-4)
			})
		})
	}
}

// TestMatMulAddFP8Fallbacks: MatMulAddFP8 where gemv_fp8_v does not run:
// FT_FP8_GEMV=legacy (fp8.cu's gemv_fp8 in its adding mode: bit for bit
// gemv_fp8 then Add), a block size that is not a power of two (gemv_fp8
// again), a width not a multiple of 16 and several tokens (the weight
// dequantized to BF16, a GEMM adding into y: within the BF16-weight
// tolerance of MatMulFP8's own such path).
func TestMatMulAddFP8Fallbacks(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct {
		T, N, D, block int
		legacy, exact  bool
	}{
		{1, 4096, 4096, 0, true, true},    // legacy gemv_fp8, per channel
		{1, 1000, 320, 64, true, true},    // legacy, partial edge blocks
		{1, 300, 96 * 4, 48, false, true}, // block 48: gemv_fp8
		{1, 333, 100, 0, false, false},    // D % 16 != 0: dequantize + GEMM (beta 1)
		{1, 256, 256, 8, false, false},    // block 8: dequantize + GEMM
		{3, 1000, 512, 128, false, false}, // several tokens
		{7, 301, 256, 0, false, false},
	} {
		layout := kernels.FP8Layout{Block: c.block}
		t.Run(fmt.Sprintf("%dx%dx%d_%v_legacy%v", c.T, c.N, c.D, layout, c.legacy), func(t *testing.T) {
			gb.LegacyFP8GEMV = c.legacy
			defer func() { gb.LegacyFP8GEMV = false }()
			w := newFP8Weight(t, rng, c.N, c.D, layout, runtime.F32)
			x := randBF16(rng, c.T*c.D, 1)
			atol, rtol := 2e-4, 1e-4
			if !c.exact {
				atol, rtol = 3e-3, 8e-3 // the weight rounded to bf16 for cuBLAS
			}
			fp8AddCheck(t, c.T, x, w, layout, c.exact, atol, rtol)
		})
	}
}

// TestMatMulAddFP8Choice: AddsFP8 takes one token only, and none with
// NoFP8Add (FT_FP8_ADD=0); bad operands get errors, not launches.
func TestMatMulAddFP8Choice(t *testing.T) {
	needGPU(t)
	if !gb.AddsFP8(1) || gb.AddsFP8(2) {
		t.Errorf("AddsFP8(1), AddsFP8(2) = %v, %v; want true, false", gb.AddsFP8(1), gb.AddsFP8(2))
	}
	gb.NoFP8Add = true
	off := gb.AddsFP8(1)
	gb.NoFP8Add = false
	if off {
		t.Error("AddsFP8(1) with NoFP8Add: true, want false")
	}
	rng := newRNG(t)
	layout := kernels.FP8Layout{}
	w := newFP8Weight(t, rng, 64, 128, layout, runtime.F32)
	gx := gpu(t, runtime.BF16, randBF16(rng, 128, 1), 1, 128)
	for _, c := range []struct {
		what string
		y    *runtime.Tensor
		x    *runtime.Tensor
	}{
		{"y BF16", gpu(t, runtime.BF16, nil, 1, 64), gx},
		{"y of the wrong size", gpu(t, runtime.F32, nil, 1, 63), gx},
		{"x of the wrong width", gpu(t, runtime.F32, nil, 1, 64), gpu(t, runtime.BF16, nil, 1, 100)},
		{"y on the host", host(t, runtime.F32, nil, 1, 64), gx},
	} {
		if err := gb.MatMulAddFP8(c.y, c.x, w.g, w.gs, layout); err == nil {
			t.Errorf("%s: no error", c.what)
		}
	}
	if err := gb.MatMulAddFP8(gpu(t, runtime.F32, nil, 1, 64), gx, w.g, gpu(t, runtime.F32, nil, 63, 1), layout); err == nil {
		t.Error("scales of the wrong shape: no error")
	}
}
