package kernels

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// gemvGrain is the number of multiply-adds below which a MatMul runs on the
// calling goroutine (about 10 µs of scalar work, a few hand-off costs).
const gemvGrain = 1 << 15

// MatMul computes out[i,j] = Σ_k x[i,k]·w[j,k] for i<m, j<n=w.Rows,
// k<w.Cols (PyTorch Linear layout: w is [out,in]); x is [m,k] and out [m,n],
// both float32, accumulation in float32 whatever w's dtype (F32, BF16, F16).
// Size mismatches are errors.
//
// m = 1 (decode) is a memory-bound GEMV parallel over output rows j, four
// rows per pass over x, half-precision rows widened on the fly. m > 1
// (prefill) blocks over j: a block of w rows is widened once into float32
// scratch and reused by every row of x, four w rows per pass over an x row.
// Both sum in the same order, so row i of the result does not depend on m or
// on the number of cores.
func MatMul(out, x []float32, m int, w Mat) error {
	if err := w.Validate(); err != nil {
		return fmt.Errorf("kernels.MatMul: w: %w", err)
	}
	n, k := w.Rows, w.Cols
	if m < 0 {
		return fmt.Errorf("kernels.MatMul: negative m = %d", m)
	}
	if len(x) != m*k {
		return fmt.Errorf("kernels.MatMul: x has %d values, want m*k = %d*%d = %d", len(x), m, k, m*k)
	}
	if len(out) != m*n {
		return fmt.Errorf("kernels.MatMul: out has %d values, want m*n = %d*%d = %d", len(out), m, n, m*n)
	}
	if m == 0 || n == 0 {
		return nil
	}
	if k == 0 {
		clear(out)
		return nil
	}
	if m == 1 {
		gemv(out, x, w)
		return nil
	}
	gemm(out, x, m, w)
	return nil
}

// gemv: out[j] = Σ_k x[k]·w[j,k], parallel over blocks of four rows.
func gemv(out, x []float32, w Mat) {
	n, k := w.Rows, w.Cols
	quads := (n + 3) / 4
	grain := max(1, gemvGrain/(4*k))
	if !splits(quads, grain) {
		gemvRows(out, x, w, 0, n)
		return
	}
	parallelFor(quads, grain, func(_, lo, hi int) { gemvRows(out, x, w, 4*lo, min(4*hi, n)) })
}

// gemvRows computes out[j] for j in [j0,j1), four rows per pass over x,
// half-precision rows widened on the fly.
func gemvRows(out, x []float32, w Mat, j0, j1 int) {
	k := w.Cols
	j := j0
	switch w.DType {
	case runtime.F32:
		v := w.F32
		for ; j+4 <= j1; j += 4 {
			out[j], out[j+1], out[j+2], out[j+3] = dot1x4(x, v[j*k:], v[(j+1)*k:], v[(j+2)*k:], v[(j+3)*k:])
		}
		for ; j < j1; j++ {
			out[j] = dot(x, v[j*k:])
		}
	case runtime.BF16:
		h := w.Half
		for ; j+4 <= j1; j += 4 {
			out[j], out[j+1], out[j+2], out[j+3] = dot1x4BF16(x, h[j*k:], h[(j+1)*k:], h[(j+2)*k:], h[(j+3)*k:])
		}
		for ; j < j1; j++ {
			out[j] = dotBF16(x, h[j*k:])
		}
	case runtime.F16:
		t, h := f16Lookup(), w.Half
		for ; j+4 <= j1; j += 4 {
			out[j], out[j+1], out[j+2], out[j+3] = dot1x4F16(t, x, h[j*k:], h[(j+1)*k:], h[(j+2)*k:], h[(j+3)*k:])
		}
		for ; j < j1; j++ {
			out[j] = dotF16(t, x, h[j*k:])
		}
	}
}

// gemmBlockRows is how many w rows one block widens: about 128 KiB of
// float32 (an L2-resident panel), a multiple of four for dot1x4.
func gemmBlockRows(k int) int {
	b := (32 << 10) / k
	return max(4, min(64, b&^3))
}

// gemm: out[i,j] = Σ_k x[i,k]·w[j,k] for m > 1, parallel over blocks of w
// rows.
func gemm(out, x []float32, m int, w Mat) {
	n, k := w.Rows, w.Cols
	bRows := gemmBlockRows(k)
	blocks := (n + bRows - 1) / bRows
	grain := max(1, gemvGrain/(m*bRows*k))
	if !splits(blocks, grain) {
		gemmBlocks(out, x, m, w, bRows, 0, blocks)
		return
	}
	parallelFor(blocks, grain, func(_, lo, hi int) { gemmBlocks(out, x, m, w, bRows, lo, hi) })
}

// gemmBlocks computes the columns of out for w-row blocks [b0,b1).
func gemmBlocks(out, x []float32, m int, w Mat, bRows, b0, b1 int) {
	n, k := w.Rows, w.Cols
	var bp *[]float32
	if w.DType != runtime.F32 {
		bp = getF32(bRows * k)
		defer putF32(bp)
	}
	for b := b0; b < b1; b++ {
		j0 := b * bRows
		j1 := min(j0+bRows, n)
		var panel []float32 // rows j0..j1 of w as float32
		if w.DType == runtime.F32 {
			panel = w.F32[j0*k : j1*k]
		} else {
			panel = (*bp)[:(j1-j0)*k]
			w.widenRows(panel, j0, j1)
		}
		gemmPanel(out, x, m, n, k, panel, j0, j1-j0)
	}
}

// gemmPanel computes out[i, j0+c] = Σ_k x[i,k]·panel[c,k] for all i < m and
// c < cols: each quad of panel rows stays in L1 while every x row streams
// past it.
func gemmPanel(out, x []float32, m, n, k int, panel []float32, j0, cols int) {
	c := 0
	for ; c+4 <= cols; c += 4 {
		w0, w1, w2, w3 := panel[c*k:(c+1)*k], panel[(c+1)*k:(c+2)*k], panel[(c+2)*k:(c+3)*k], panel[(c+3)*k:(c+4)*k]
		for i := range m {
			o := out[i*n+j0+c : i*n+j0+c+4]
			o[0], o[1], o[2], o[3] = dot1x4(x[i*k:(i+1)*k], w0, w1, w2, w3)
		}
	}
	for ; c < cols; c++ {
		wc := panel[c*k : (c+1)*k]
		for i := range m {
			out[i*n+j0+c] = dot(x[i*k:(i+1)*k], wc)
		}
	}
}
