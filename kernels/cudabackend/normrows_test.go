//go:build cuda

package cudabackend

import (
	"fmt"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestNormRowsGPU: RMSNorm and AddRMSNorm of an F32 residual through the
// many-rows kernels (normrows.cu; NormRowsAll) against the CPU reference,
// and bit for bit against norm.cu's one-block-per-row kernels
// (NormRowsOff): out, and x after the add. Row lengths cover J = 1
// (2048, 2560, 3072, 4096) and J = 2 (4100, 6144, 8192).
func TestNormRowsGPU(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	defer func(m NormRowsMode) { gb.NormRows = m }(gb.NormRows)
	for _, c := range []struct{ T, D int }{{130, 4096}, {3, 2048}, {9, 3072}, {5, 6144}, {4, 8192}, {3, 4100}, {2, 2560}} {
		t.Run(fmt.Sprintf("%dx%d", c.T, c.D), func(t *testing.T) {
			if _, _, _, ok := normRows(NormRowsAll, c.T, c.D); !ok {
				t.Fatalf("the many-rows kernels do not take %d×%d", c.T, c.D)
			}
			if normF32Block(c.D) != rmsF32Threads(c.D) {
				t.Fatalf("normF32Block(%d) = %d, rmsF32Threads %d", c.D, normF32Block(c.D), rmsF32Threads(c.D))
			}
			xv, yv := randBF16(rng, c.T*c.D, 4), randBF16(rng, c.T*c.D, 4)
			wv := randBF16(rng, c.D, 1)
			gw := gpu(t, runtime.BF16, wv, c.D)
			gy := gpu(t, runtime.F32, yv, c.T, c.D)
			run := func(mode NormRowsMode) (norm, addX, addOut []float32) {
				gb.NormRows = mode
				gx := gpu(t, runtime.F32, xv, c.T, c.D)
				out := poisoned(t, runtime.BF16, c.T, c.D)
				if err := gb.RMSNorm(out, gx, gw, 1e-5); err != nil {
					t.Fatal(err)
				}
				norm = read(t, out)
				out2 := poisoned(t, runtime.BF16, c.T, c.D)
				if err := gb.AddRMSNorm(out2, gx, gy, gw, 1e-5); err != nil {
					t.Fatal(err)
				}
				return norm, read(t, gx), read(t, out2)
			}
			norm, addX, addOut := run(NormRowsAll)
			rout := host(t, runtime.F32, nil, c.T, c.D)
			hw := host(t, runtime.F32, wv, c.D)
			if err := cb.RMSNorm(rout, host(t, runtime.F32, xv, c.T, c.D), hw, 1e-5); err != nil {
				t.Fatal(err)
			}
			compare(t, "RMSNorm", norm, rout.F32(), 1e-2, 1e-2)
			rx, rout2 := host(t, runtime.F32, xv, c.T, c.D), host(t, runtime.F32, nil, c.T, c.D)
			if err := cb.AddRMSNorm(rout2, rx, host(t, runtime.F32, yv, c.T, c.D), hw, 1e-5); err != nil {
				t.Fatal(err)
			}
			compare(t, "AddRMSNorm x", addX, rx.F32(), 1e-6, 1e-6)
			compare(t, "AddRMSNorm out", addOut, rout2.F32(), 1e-2, 1e-2)

			oNorm, oX, oOut := run(NormRowsOff)
			if !slices.Equal(norm, oNorm) {
				t.Errorf("RMSNorm: many-rows and one-block-per-row kernels differ")
			}
			if !slices.Equal(addX, oX) || !slices.Equal(addOut, oOut) {
				t.Errorf("AddRMSNorm: many-rows and one-block-per-row kernels differ")
			}
		})
	}
}
