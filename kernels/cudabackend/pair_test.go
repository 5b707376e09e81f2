//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestMatMulPair: k and v in one strided-batched GEMM equal the CPU
// reference, for weights side by side in one buffer (as in an arena),
// in two buffers (either order in memory), outputs in bf16 and fp32, and
// for one token (the GEMV path).
func TestMatMulPair(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct {
		T, N, D  int
		adjacent bool
		swap     bool
		dt       runtime.DType
	}{
		{64, 1024, 4096, true, false, runtime.BF16},
		{64, 1024, 4096, false, false, runtime.BF16},
		{64, 1024, 4096, false, true, runtime.BF16},
		{300, 96, 200, true, false, runtime.F32},
		{7, 256, 512, false, true, runtime.F32},
		{1, 1024, 4096, false, false, runtime.BF16},
	} {
		t.Run(fmt.Sprintf("%dx%dx%d_adjacent%v_swap%v_%v", c.T, c.N, c.D, c.adjacent, c.swap, c.dt), func(t *testing.T) {
			x := randBF16(rng, c.T*c.D, 1)
			sc := float32(1 / math.Sqrt(float64(c.D)))
			wa, wb := randBF16(rng, c.N*c.D, sc), randBF16(rng, c.N*c.D, sc)
			gx := gpu(t, runtime.BF16, x, c.T, c.D)
			var ga, gwb *runtime.Tensor
			if c.adjacent {
				both := gpu(t, runtime.BF16, append(append([]float32(nil), wa...), wb...), 2*c.N, c.D)
				var err error
				if ga, err = both.Slice(0, c.N); err != nil {
					t.Fatal(err)
				}
				if gwb, err = both.Slice(c.N, 2*c.N); err != nil {
					t.Fatal(err)
				}
			} else {
				ga, gwb = gpu(t, runtime.BF16, wa, c.N, c.D), gpu(t, runtime.BF16, wb, c.N, c.D)
			}
			oa, ob := poisoned(t, c.dt, c.T, c.N), poisoned(t, c.dt, c.T, c.N)
			if c.swap {
				ga, gwb, oa, ob = gwb, ga, ob, oa
				wa, wb = wb, wa
			}
			if err := gb.MatMulPair(oa, ob, gx, ga, gwb); err != nil {
				t.Fatal(err)
			}
			for i, p := range []struct {
				out *runtime.Tensor
				w   []float32
			}{{oa, wa}, {ob, wb}} {
				ref := host(t, runtime.F32, nil, c.T, c.N)
				if err := cb.MatMul(ref, host(t, runtime.BF16, x, c.T, c.D), host(t, runtime.BF16, p.w, c.N, c.D)); err != nil {
					t.Fatal(err)
				}
				atol, rtol := 1e-4, 1e-4
				if c.dt == runtime.BF16 {
					atol, rtol = 2e-3, 8e-3
				}
				compare(t, fmt.Sprint("MatMulPair out ", i), read(t, p.out), ref.F32(), atol, rtol)
			}
		})
	}
	if err := gb.MatMulPair(poisoned(t, runtime.BF16, 4, 8), poisoned(t, runtime.BF16, 4, 8), gpu(t, runtime.BF16, nil, 4, 16),
		gpu(t, runtime.BF16, nil, 8, 16), gpu(t, runtime.BF16, nil, 16, 8)); err == nil {
		t.Error("weights of different shapes: no error")
	}
}
