//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// randFP8 returns n random finite E4M3 codes.
func randFP8(rng *rand.Rand, n int) []byte {
	q := make([]byte, n)
	for i := range q {
		for {
			b := byte(rng.IntN(256))
			if b&0x7f != 0x7f { // not NaN
				q[i] = b
				break
			}
		}
	}
	return q
}

// rawTensors makes the same bytes as a GPU tensor and a CPU one.
func rawTensors(t *testing.T, dt runtime.DType, data []byte, shape ...int) (g, h *runtime.Tensor) {
	t.Helper()
	g = gpu(t, dt, nil, shape...)
	if err := gb.WriteBytes(g, data); err != nil {
		t.Fatal(err)
	}
	h, err := runtime.NewTensor(cpu, dt, shape, "reference")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Buffer().Free)
	copy(h.Bytes(), data)
	return g, h
}

// TestMatMulFP8: the W8A16 GEMV (one token) and the dequantize-then-cuBLAS
// path (several tokens, or shapes the GEMV does not take) against the CPU
// reference, per-channel and block scales (partial edge blocks included),
// F32 and BF16 scales, BF16 and F32 outputs.
func TestMatMulFP8(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct {
		T, N, D, block int
		sdt, out       runtime.DType
	}{
		{1, 4096, 4096, 0, runtime.BF16, runtime.BF16},   // GEMV, per channel
		{1, 14336, 4096, 128, runtime.F32, runtime.BF16}, // GEMV, Llama-3-8B gate/up, 128-blocks
		{1, 1000, 320, 64, runtime.F32, runtime.BF16},    // GEMV, partial edge blocks (1000 = 15·64 + 40)
		{1, 3000, 512, 0, runtime.BF16, runtime.F32},     // GEMV into F32 logits
		{1, 333, 100, 0, runtime.F32, runtime.BF16},      // D % 16 != 0: dequantize + cuBLAS
		{1, 256, 256, 8, runtime.F32, runtime.BF16},      // block % 16 != 0: dequantize + cuBLAS
		{7, 300, 256, 0, runtime.BF16, runtime.BF16},     // prefill: dequantize + cuBLAS
		{64, 1000, 4096, 128, runtime.F32, runtime.BF16}, // prefill, partial blocks
		{5, 1024, 1024, 128, runtime.F32, runtime.F32},   // prefill into F32
	} {
		layout := kernels.FP8Layout{Block: c.block}
		t.Run(fmt.Sprintf("%dx%dx%d_%v_scale%v_%v", c.T, c.N, c.D, layout, c.sdt, c.out), func(t *testing.T) {
			x := randBF16(rng, c.T*c.D, 1)
			q := randFP8(rng, c.N*c.D)
			ss := layout.ScaleShape(c.N, c.D)
			// codes reach ±448: scales of about 1/(448·√D) give weights
			// like TestMatMul's.
			sv := make([]float32, ss.NumElements())
			for i := range sv {
				sv[i] = runtime.BF16ToF32(runtime.F32ToBF16(float32((0.5 + rng.Float64()) / (448 * math.Sqrt(float64(c.D))))))
			}
			var sbytes []byte
			if c.sdt == runtime.F32 {
				sbytes = f32Bytes(sv)
			} else {
				sbytes = bf16Bytes(sv)
			}
			gw, hw := rawTensors(t, runtime.F8E4M3, q, c.N, c.D)
			gs, hs := rawTensors(t, c.sdt, sbytes, ss...)
			out := poisoned(t, c.out, c.T, c.N)
			if err := gb.MatMulFP8(out, gpu(t, runtime.BF16, x, c.T, c.D), gw, gs, layout); err != nil {
				t.Fatal(err)
			}
			ref := host(t, runtime.F32, nil, c.T, c.N)
			if err := cb.MatMulFP8(ref, host(t, runtime.F32, x, c.T, c.D), hw, hs, layout); err != nil {
				t.Fatal(err)
			}
			gemv := c.T == 1 && c.D%16 == 0 && c.block%16 == 0
			atol, rtol := 3e-3, 8e-3 // bf16 output, or the weight rounded to bf16 for cuBLAS
			if c.out == runtime.F32 && gemv {
				atol, rtol = 2e-4, 1e-4
			}
			compare(t, "MatMulFP8", read(t, out), ref.F32(), atol, rtol)
		})
	}
}

// TestMatMulFP8Errors: a weight the kernels do not take or misshapen
// scales are errors naming them.
func TestMatMulFP8Errors(t *testing.T) {
	needGPU(t)
	x := gpu(t, runtime.BF16, make([]float32, 64), 1, 64)
	out := poisoned(t, runtime.BF16, 1, 8)
	w8 := gpu(t, runtime.F8E4M3, nil, 8, 64)
	e5 := gpu(t, runtime.F8E5M2, nil, 8, 64)
	s := gpu(t, runtime.F32, make([]float32, 8), 8, 1)
	bad := gpu(t, runtime.F32, make([]float32, 4), 4, 1)
	for _, c := range []struct {
		name     string
		w, scale *runtime.Tensor
		want     string
	}{
		{"e5m2", e5, s, "take F8_E4M3"},
		{"bf16 weight", gpu(t, runtime.BF16, make([]float32, 8*64), 8, 64), s, "weight is BF16"},
		{"scale shape", w8, bad, "scale of shape [4 1]"},
	} {
		if err := gb.MatMulFP8(out, x, c.w, c.scale, kernels.FP8Layout{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}
