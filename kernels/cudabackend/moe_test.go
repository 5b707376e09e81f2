//go:build cuda

package cudabackend

import (
	"fmt"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestMoERowOps: GatherRows (BF16 and F32 rows), ScatterAddRows and Zero
// against the CPU reference, with one row (kernel arguments) and several
// (uploaded tables), twice in a row so the second call's tables replace the
// first's.
func TestMoERowOps(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	const R, W = 7, 264
	for _, rows := range [][]int32{{4}, {6, 0, 3}, {0, 1, 2, 3, 4, 5, 6}, {5, 2}} {
		t.Run(fmt.Sprint(rows), func(t *testing.T) {
			n := len(rows)
			weights := randBF16(rng, n, 1)
			for _, dt := range []runtime.DType{runtime.BF16, runtime.F32} {
				src := randBF16(rng, R*W, 2)
				got := poisoned(t, dt, n, W)
				if err := gb.GatherRows(got, gpu(t, dt, src, R, W), rows); err != nil {
					t.Fatal(err)
				}
				want := host(t, runtime.F32, nil, n, W)
				if err := cb.GatherRows(want, host(t, runtime.F32, src, R, W), rows); err != nil {
					t.Fatal(err)
				}
				compare(t, fmt.Sprintf("GatherRows %v", dt), read(t, got), want.F32(), 0, 0)
			}
			acc, part := randBF16(rng, R*W, 1), randBF16(rng, n*W, 1)
			dst := gpu(t, runtime.F32, acc, R, W)
			if err := gb.ScatterAddRows(dst, gpu(t, runtime.F32, part, n, W), rows, weights); err != nil {
				t.Fatal(err)
			}
			want := host(t, runtime.F32, acc, R, W)
			if err := cb.ScatterAddRows(want, host(t, runtime.F32, part, n, W), rows, weights); err != nil {
				t.Fatal(err)
			}
			compare(t, "ScatterAddRows", read(t, dst), want.F32(), 1e-6, 1e-6)
			if err := gb.Zero(dst); err != nil {
				t.Fatal(err)
			}
			compare(t, "Zero", read(t, dst), make([]float32, R*W), 0, 0)
		})
	}
	if err := gb.GatherRows(poisoned(t, runtime.BF16, 1, W), gpu(t, runtime.BF16, nil, R, W), []int32{R}); err == nil {
		t.Error("a row index past the rows gathered")
	}
}
