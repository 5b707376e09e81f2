//go:build cuda

package cudabackend

import (
	"fmt"
	"os"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// noFusedAddNormFromEnv is the default of Backend.NoFusedAddNorm.
func noFusedAddNormFromEnv() bool { return os.Getenv("FT_FUSE_ADDNORM") == "0" }

// AddRMSNorm: x += y, then out = RMSNorm(x)·w, in one launch of
// add_rmsnorm_f32_bf16 for the fp32 residual stream (F32 x and y, BF16 out
// and w, rows of a multiple of 4 values, 16-byte aligned); otherwise, or
// with NoFusedAddNorm set, Add then RMSNorm (kernels.AddRMSNormer).
func (b *Backend) AddRMSNorm(out, x, y, w *runtime.Tensor, eps float32) error {
	for _, c := range []struct {
		n string
		t *runtime.Tensor
	}{{"out", out}, {"x", x}, {"y", y}, {"w", w}} {
		if err := b.onDevice("AddRMSNorm", c.n, c.t); err != nil {
			return err
		}
	}
	dim := w.NumElements()
	if dim == 0 || x.Dim(-1) != dim || y.NumElements() != x.NumElements() || out.NumElements() != x.NumElements() {
		return fmt.Errorf("cudabackend.AddRMSNorm: x %v, y %v, w %v, out %v disagree", x.Shape(), y.Shape(), w.Shape(), out.Shape())
	}
	fused := !b.NoFusedAddNorm && x.DType() == runtime.F32 && y.DType() == runtime.F32 && out.DType() == runtime.BF16 &&
		w.DType() == runtime.BF16 && dim%4 == 0 && aligned16(x.Ptr(), y.Ptr()) && out.Ptr()%4 == 0 && w.Ptr()%4 == 0
	if !fused {
		if err := b.Add(x, x, y); err != nil {
			return err
		}
		return b.RMSNorm(out, x, w, eps)
	}
	rows := x.NumElements() / dim
	if rows == 0 {
		return nil
	}
	if ot, threads, j, ok := normRows(b.NormRows, rows, dim); ok && out.Ptr()%8 == 0 && w.Ptr()%8 == 0 {
		bytes := int64(rows) * int64(dim) * (4 + 4 + 4 + 2)
		return b.k.normRows.add[j].LaunchBytes(b.s, bytes, cuda.Dim3{X: rows}, cuda.Dim3{X: threads}, 0,
			cuda.Ptr(out.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(y.Ptr()), cuda.Ptr(w.Ptr()), cuda.I32(dim), cuda.F32(eps), cuda.I32(ot))
	}
	threads := min(1024, max(32, (dim/4+31)/32*32)) // as RMSNorm picks for an F32 x: the same sums
	bytes := int64(rows) * int64(dim) * (4 + 4 + 4 + 2)
	return b.k.addRMS.LaunchBytes(b.s, bytes, cuda.Dim3{X: rows}, cuda.Dim3{X: threads}, 0,
		cuda.Ptr(out.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(y.Ptr()), cuda.Ptr(w.Ptr()), cuda.I32(dim), cuda.F32(eps))
}

var _ kernels.AddRMSNormer = (*Backend)(nil)
