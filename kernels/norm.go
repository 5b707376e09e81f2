package kernels

import (
	"fmt"
	"math"

	"github.com/flextensor-go/flextensor/runtime"
)

// RMSNorm computes out[r,c] = x[r,c] / sqrt(mean_c(x[r,c]²) + eps) · w[c] for
// r < rows, c < dim = len(x)/rows; w holds dim values (any shape, any dtype).
// The mean of squares is accumulated in float64; out may alias x.
func RMSNorm(out, x []float32, rows int, w Mat, eps float32) error {
	if err := w.Validate(); err != nil {
		return fmt.Errorf("kernels.RMSNorm: w: %w", err)
	}
	dim := w.Rows * w.Cols
	if rows < 0 {
		return fmt.Errorf("kernels.RMSNorm: negative rows = %d", rows)
	}
	if len(x) != rows*dim {
		return fmt.Errorf("kernels.RMSNorm: x has %d values, want rows*dim = %d*%d = %d", len(x), rows, dim, rows*dim)
	}
	if len(out) != len(x) {
		return fmt.Errorf("kernels.RMSNorm: out has %d values, want %d like x", len(out), len(x))
	}
	if rows == 0 || dim == 0 {
		return nil
	}
	grain := max(1, convGrain/dim)
	if !splits(rows, grain) {
		rmsNormRows(out, x, dim, w, eps, 0, rows)
		return nil
	}
	parallelFor(rows, grain, func(_, lo, hi int) { rmsNormRows(out, x, dim, w, eps, lo, hi) })
	return nil
}

func rmsNormRows(out, x []float32, dim int, w Mat, eps float32, r0, r1 int) {
	var wf []float32
	var bp *[]float32
	if w.DType == runtime.F32 {
		wf = w.F32
	} else {
		bp = getF32(dim)
		wf = *bp
		w.widenRows(wf, 0, w.Rows)
	}
	for r := r0; r < r1; r++ {
		xr, or := x[r*dim:(r+1)*dim], out[r*dim:(r+1)*dim]
		var s0, s1 float64
		c := 0
		for ; c+2 <= dim; c += 2 {
			a, b := float64(xr[c]), float64(xr[c+1])
			s0 += a * a
			s1 += b * b
		}
		if c < dim {
			a := float64(xr[c])
			s0 += a * a
		}
		scale := float32(1 / math.Sqrt((s0+s1)/float64(dim)+float64(eps)))
		wf := wf[:dim]
		for c, v := range xr {
			or[c] = v * scale * wf[c]
		}
	}
	if bp != nil {
		putF32(bp)
	}
}
