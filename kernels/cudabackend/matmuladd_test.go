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

// TestMatMulAdd: y += x·wᵀ into an F32 y against the CPU reference
// (kernels.MatMulAdd: MatMul, then Add), and for one token bit for bit
// against the GPU's own MatMul into F32 then Add; with dependent launch on
// and off alike.
func TestMatMulAdd(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, pdl := range []bool{true, false} {
		for _, c := range []struct{ T, N, D int }{
			{1, 4096, 4096},  // o_proj: the accumulating persistent GEMV
			{1, 4096, 14336}, // down_proj
			{1, 300, 100},    // D % 8 != 0: cuBLAS, beta 1
			{7, 300, 256},    // cuBLAS, beta 1
			{64, 4096, 1024}, // a prefill
		} {
			t.Run(fmt.Sprintf("pdl=%v/%dx%dx%d", pdl, c.T, c.N, c.D), func(t *testing.T) {
				gb.dev.SetDependentLaunch(pdl)
				defer gb.dev.SetDependentLaunch(true)
				x := randBF16(rng, c.T*c.D, 1)
				w := randBF16(rng, c.N*c.D, float32(1/math.Sqrt(float64(c.D))))
				y0 := randBF16(rng, c.T*c.N, 4)
				gx, gw := gpu(t, runtime.BF16, x, c.T, c.D), gpu(t, runtime.BF16, w, c.N, c.D)
				y := gpu(t, runtime.F32, y0, c.T, c.N)
				if err := gb.MatMulAdd(y, gx, gw); err != nil {
					t.Fatal(err)
				}
				got := read(t, y)
				ref := host(t, runtime.F32, y0, c.T, c.N)
				if err := kernels.MatMulAdd(cb, ref, host(t, runtime.F32, x, c.T, c.D), host(t, runtime.BF16, w, c.N, c.D),
					host(t, runtime.F32, nil, c.T, c.N)); err != nil {
					t.Fatal(err)
				}
				compare(t, "MatMulAdd", got, ref.F32(), 1e-4, 1e-4)
				if c.T != 1 || c.D%8 != 0 {
					return
				}
				prod, sum := poisoned(t, runtime.F32, c.T, c.N), gpu(t, runtime.F32, y0, c.T, c.N)
				if err := gb.MatMul(prod, gx, gw); err != nil {
					t.Fatal(err)
				}
				if err := gb.Add(sum, sum, prod); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(read(t, sum), got) {
					t.Error("one token: MatMulAdd differs from MatMul then Add")
				}
			})
		}
	}
	bad := gpu(t, runtime.BF16, make([]float32, 8), 1, 8)
	if err := gb.MatMulAdd(bad, bad, gpu(t, runtime.BF16, make([]float32, 64), 8, 8)); err == nil {
		t.Error("a BF16 y: no error")
	}
}
