//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestFP8GEMVtcRange: the tensor-core variants stage x in f16 times a power
// of two taken from max|x| (fp8gemv_tc.cu); x with outliers past f16's
// range (2·10^5 > 65504), with values 2^-28 below its maximum and x of
// magnitude 10^-30 or zero all give the CPU reference's product (F32 out,
// tolerance relative to the largest output), and per-block scales run the
// default variant instead.
func TestFP8GEMVtcRange(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct {
		name string
		N, D int
		x    func(i int, r float32) float32
	}{
		{"outliers", 1001, 4112, func(i int, r float32) float32 {
			if i%997 == 5 {
				return 2e5 * r
			}
			if i%7 == 3 {
				return 1e-9 * r // under 2e5·2^-28 ≈ 7e-4: f16 subnormals (here 0), an error far under the tolerance
			}
			return r
		}},
		{"tiny", 300, 14336, func(i int, r float32) float32 { return 1e-30 * r }},
		{"zero", 64, 528, func(int, float32) float32 { return 0 }},
	} {
		t.Run(fmt.Sprintf("%s_%dx%d", c.name, c.N, c.D), func(t *testing.T) {
			layout := kernels.FP8Layout{}
			w := newFP8Weight(t, rng, c.N, c.D, layout, runtime.BF16)
			x := randBF16(rng, c.D, 1)
			for i := range x {
				x[i] = runtime.BF16ToF32(runtime.F32ToBF16(c.x(i, x[i])))
			}
			gx := gpu(t, runtime.BF16, x, 1, c.D)
			ref := fp8Ref(t, x, w, layout)
			big := 0.0
			for _, v := range ref {
				big = max(big, math.Abs(float64(v)))
			}
			for _, name := range []string{"tc4", "tc8", fp8DefaultVariant} {
				t.Run(name, func(t *testing.T) {
					gb.FP8Variant = name
					defer func() { gb.FP8Variant = fp8DefaultVariant }()
					if v := gb.fp8GEMVs(layout); v != gb.k.fp8.variants[name] {
						t.Fatalf("per-channel scales: fp8GEMVs runs %s, want %s", v.gemv.Name(), name)
					}
					mustFast(t, fp8Gemv, c.D, layout, c.N, gx.Ptr(), w.g.Ptr())
					out := poisoned(t, runtime.F32, 1, c.N)
					if err := gb.MatMulFP8(out, gx, w.g, w.gs, layout); err != nil {
						t.Fatal(err)
					}
					compare(t, "gemv_fp8_v "+name, read(t, out), ref, 1e-5*big+1e-37, 1e-4)
				})
			}
		})
	}
	gb.FP8Variant = "tc8"
	defer func() { gb.FP8Variant = fp8DefaultVariant }()
	if v := gb.fp8GEMVs(kernels.FP8Layout{Block: 128}); v != gb.k.fp8.variants[fp8DefaultVariant] || v.tc {
		t.Fatalf("tc8 with 128-blocks: fp8GEMVs runs %s, want the default %s", v.gemv.Name(), fp8DefaultVariant)
	}
}
