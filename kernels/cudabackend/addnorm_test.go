//go:build cuda

package cudabackend

import (
	"fmt"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestAddRMSNormGPU: the fused residual add + RMSNorm against the CPU
// reference, and bit for bit against the unfused GPU path (Add, then
// RMSNorm): x and out both.
func TestAddRMSNormGPU(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct{ T, D int }{{1, 4096}, {7, 4096}, {3, 5120}, {2, 64}, {1, 4100}} {
		t.Run(fmt.Sprintf("%dx%d", c.T, c.D), func(t *testing.T) {
			xv, yv := randBF16(rng, c.T*c.D, 4), randBF16(rng, c.T*c.D, 4)
			wv := randBF16(rng, c.D, 1)
			gw := gpu(t, runtime.BF16, wv, c.D)
			gx, gy := gpu(t, runtime.F32, xv, c.T, c.D), gpu(t, runtime.F32, yv, c.T, c.D)
			out := poisoned(t, runtime.BF16, c.T, c.D)
			if err := gb.AddRMSNorm(out, gx, gy, gw, 1e-5); err != nil {
				t.Fatal(err)
			}
			rx, rout := host(t, runtime.F32, xv, c.T, c.D), host(t, runtime.F32, nil, c.T, c.D)
			if err := cb.AddRMSNorm(rout, rx, host(t, runtime.F32, yv, c.T, c.D), host(t, runtime.F32, wv, c.D), 1e-5); err != nil {
				t.Fatal(err)
			}
			gotX, gotOut := read(t, gx), read(t, out)
			compare(t, "x", gotX, rx.F32(), 1e-6, 1e-6)
			compare(t, "out", gotOut, rout.F32(), 1e-2, 1e-2)

			gb.NoFusedAddNorm = true
			defer func() { gb.NoFusedAddNorm = noFusedAddNormFromEnv() }()
			ux := gpu(t, runtime.F32, xv, c.T, c.D)
			uout := poisoned(t, runtime.BF16, c.T, c.D)
			if err := gb.AddRMSNorm(uout, ux, gy, gw, 1e-5); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(read(t, ux), gotX) || !slices.Equal(read(t, uout), gotOut) {
				t.Errorf("fused and unfused GPU results differ")
			}
		})
	}
}
