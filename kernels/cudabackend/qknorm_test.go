//go:build cuda

package cudabackend

import (
	"fmt"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestPairRMSNormGPU: the paired in-place norm gives exactly what two
// RMSNorm launches give (q heads and k heads of Qwen3 shapes and others),
// and the CPU reference's values within BF16 rounding.
func TestPairRMSNormGPU(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct{ A, B, D int }{{32, 8, 128}, {32, 4, 128}, {4, 2, 32}, {96, 24, 64}, {1, 1, 8}} {
		t.Run(fmt.Sprintf("%d+%dx%d", c.A, c.B, c.D), func(t *testing.T) {
			av, bv := randBF16(rng, c.A*c.D, 4), randBF16(rng, c.B*c.D, 4)
			wa, wb := randBF16(rng, c.D, 1), randBF16(rng, c.D, 1)
			ga, gbt := gpu(t, runtime.BF16, av, c.A, c.D), gpu(t, runtime.BF16, bv, c.B, c.D)
			gwa, gwb := gpu(t, runtime.BF16, wa, c.D), gpu(t, runtime.BF16, wb, c.D)
			if err := gb.PairRMSNorm(ga, gwa, gbt, gwb, 1e-6); err != nil {
				t.Fatal(err)
			}
			sa, sb := gpu(t, runtime.BF16, av, c.A, c.D), gpu(t, runtime.BF16, bv, c.B, c.D)
			if err := gb.RMSNorm(sa, sa, gwa, 1e-6); err != nil {
				t.Fatal(err)
			}
			if err := gb.RMSNorm(sb, sb, gwb, 1e-6); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(read(t, ga), read(t, sa)) || !slices.Equal(read(t, gbt), read(t, sb)) {
				t.Errorf("paired and separate RMSNorm launches differ")
			}
			ra, rb := host(t, runtime.F32, av, c.A, c.D), host(t, runtime.F32, bv, c.B, c.D)
			if err := cb.PairRMSNorm(ra, host(t, runtime.F32, wa, c.D), rb, host(t, runtime.F32, wb, c.D), 1e-6); err != nil {
				t.Fatal(err)
			}
			compare(t, "a", read(t, ga), ra.F32(), 1e-2, 1e-2)
			compare(t, "b", read(t, gbt), rb.F32(), 1e-2, 1e-2)
		})
	}
}
