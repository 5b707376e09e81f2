//go:build cuda

package cudabackend

import (
	"fmt"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

var _ kernels.ResidualNormer = (*Backend)(nil)

// ResidualViaNorm is kernels.ResidualNormer: with ResidualNorm set
// (FT_PREFILL_RESACC=1), for ResidualViaNormMinTokens tokens or more of
// rows add_rmsnorm_bf16y_rows takes (normRowsShape).
func (b *Backend) ResidualViaNorm(T, dim int) bool {
	_, _, _, ok := normRowsShape(dim)
	return b.ResidualNorm && T >= ResidualViaNormMinTokens && ok
}

// AddBF16RMSNorm is kernels.ResidualNormer: x += y (y BF16 widened
// exactly), out = RMSNorm(x)·w by add_rmsnorm_bf16y_rows (normrows.cu:
// the sums of rmsnorm_f32in_bf16 at its block size); ran false for rows
// those kernels do not take (normRowsShape) or unaligned pointers are an
// error (ResidualViaNorm says which rows they take).
func (b *Backend) AddBF16RMSNorm(out, x, y, w *runtime.Tensor, eps float32) error {
	for _, c := range []struct {
		n string
		t *runtime.Tensor
	}{{"out", out}, {"x", x}, {"y", y}, {"w", w}} {
		if err := b.onDevice("AddBF16RMSNorm", c.n, c.t); err != nil {
			return err
		}
	}
	dim := w.NumElements()
	if dim == 0 || x.Dim(-1) != dim || y.NumElements() != x.NumElements() || out.NumElements() != x.NumElements() {
		return fmt.Errorf("cudabackend.AddBF16RMSNorm: x %v, y %v, w %v, out %v disagree", x.Shape(), y.Shape(), w.Shape(), out.Shape())
	}
	if x.DType() != runtime.F32 || y.DType() != runtime.BF16 || out.DType() != runtime.BF16 || w.DType() != runtime.BF16 {
		return fmt.Errorf("cudabackend.AddBF16RMSNorm: want F32 x and BF16 y, out, w; got %v, %v, %v, %v", x.DType(), y.DType(), out.DType(), w.DType())
	}
	ot, threads, j, ok := normRowsShape(dim)
	if !ok || !aligned16(x.Ptr()) || y.Ptr()%8 != 0 || out.Ptr()%8 != 0 || w.Ptr()%8 != 0 {
		return fmt.Errorf("cudabackend.AddBF16RMSNorm: rows of %d values (x %v) or these pointers are not taken (ResidualViaNorm)", dim, x.Shape())
	}
	rows := x.NumElements() / dim
	if rows == 0 {
		return nil
	}
	bytes := int64(rows) * int64(dim) * (4 + 2 + 4 + 2)
	return b.k.normRows.addB16[j].LaunchBytes(b.s, bytes, cuda.Dim3{X: rows}, cuda.Dim3{X: threads}, 0,
		cuda.Ptr(out.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(y.Ptr()), cuda.Ptr(w.Ptr()), cuda.I32(dim), cuda.F32(eps), cuda.I32(ot))
}
