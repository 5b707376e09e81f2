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

// TestAddBF16RMSNormGPU: x += y with a BF16 y, out = RMSNorm(x)·w
// (add_rmsnorm_bf16y_rows, FT_PREFILL_RESACC=1's post-attention norm)
// against the CPU reference, out written over y as the decoder does; bit
// for bit against AddRMSNorm of y widened to F32 (the same sums).
func TestAddBF16RMSNormGPU(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct{ T, D int }{{300, 4096}, {5, 8192}, {3, 2048}} {
		t.Run(fmt.Sprintf("%dx%d", c.T, c.D), func(t *testing.T) {
			xv, yv := randBF16(rng, c.T*c.D, 4), randBF16(rng, c.T*c.D, 1)
			wv := randBF16(rng, c.D, 1)
			gw := gpu(t, runtime.BF16, wv, c.D)
			gx, gy := gpu(t, runtime.F32, xv, c.T, c.D), gpu(t, runtime.BF16, yv, c.T, c.D)
			if err := gb.AddBF16RMSNorm(gy, gx, gy, gw, 1e-5); err != nil {
				t.Fatal(err)
			}
			gotX, gotOut := read(t, gx), read(t, gy)
			rx, rout := host(t, runtime.F32, xv, c.T, c.D), host(t, runtime.F32, nil, c.T, c.D)
			if err := cb.AddRMSNorm(rout, rx, host(t, runtime.F32, yv, c.T, c.D), host(t, runtime.F32, wv, c.D), 1e-5); err != nil {
				t.Fatal(err)
			}
			compare(t, "x", gotX, rx.F32(), 1e-6, 1e-6)
			compare(t, "out", gotOut, rout.F32(), 1e-2, 1e-2)

			fx, out := gpu(t, runtime.F32, xv, c.T, c.D), poisoned(t, runtime.BF16, c.T, c.D)
			if err := gb.AddRMSNorm(out, fx, gpu(t, runtime.F32, yv, c.T, c.D), gw, 1e-5); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(read(t, fx), gotX) || !slices.Equal(read(t, out), gotOut) {
				t.Errorf("BF16 y and the same y in F32 give different bits")
			}
		})
	}
	x, y, w := gpu(t, runtime.F32, make([]float32, 2*64), 2, 64), gpu(t, runtime.BF16, make([]float32, 2*64), 2, 64), gpu(t, runtime.BF16, make([]float32, 64), 64)
	defer func(on bool) { gb.ResidualNorm = on }(gb.ResidualNorm)
	gb.ResidualNorm = true
	if gb.ResidualViaNorm(1024, 64) {
		t.Error("ResidualViaNorm takes rows of 64 values")
	}
	if !gb.ResidualViaNorm(ResidualViaNormMinTokens, 4096) || gb.ResidualViaNorm(ResidualViaNormMinTokens-1, 4096) {
		t.Errorf("ResidualViaNorm: want it from %d tokens of 4096 values", ResidualViaNormMinTokens)
	}
	if err := gb.AddBF16RMSNorm(y, x, y, w, 1e-5); err == nil {
		t.Error("rows of 64 values: no error")
	}
}
