//go:build cuda

package cudabackend

import (
	"fmt"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// PairRMSNorm normalises a's and b's rows in place in one launch of
// rmsnorm_pair_bf16_v8 (BF16 tensors and weights, rows of a multiple of 8
// values, 16-byte aligned); otherwise two RMSNorm calls
// (kernels.PairRMSNormer).
func (b *Backend) PairRMSNorm(x, wx, y, wy *runtime.Tensor, eps float32) error {
	for _, c := range []struct {
		n string
		t *runtime.Tensor
	}{{"a", x}, {"a's weight", wx}, {"b", y}, {"b's weight", wy}} {
		if err := b.onDevice("PairRMSNorm", c.n, c.t); err != nil {
			return err
		}
	}
	dim := wx.NumElements()
	if dim == 0 || wy.NumElements() != dim || x.Dim(-1) != dim || y.Dim(-1) != dim {
		return fmt.Errorf("cudabackend.PairRMSNorm: a %v, b %v, weights %v / %v: want rows of one width", x.Shape(), y.Shape(), wx.Shape(), wy.Shape())
	}
	fused := dim%8 == 0 && x.DType() == runtime.BF16 && y.DType() == runtime.BF16 && wx.DType() == runtime.BF16 &&
		wy.DType() == runtime.BF16 && aligned16(x.Ptr(), y.Ptr(), wx.Ptr(), wy.Ptr())
	if !fused {
		if err := b.RMSNorm(x, x, wx, eps); err != nil {
			return err
		}
		return b.RMSNorm(y, y, wy, eps)
	}
	ra, rb := x.NumElements()/dim, y.NumElements()/dim
	if ra+rb == 0 {
		return nil
	}
	threads := normThreads(dim) // as RMSNorm picks for BF16 rows: the same sums
	bytes := int64(ra+rb)*int64(dim)*4 + 2*int64(dim)*2
	return b.k.rmsPair.LaunchBytes(b.s, bytes, cuda.Dim3{X: ra + rb}, cuda.Dim3{X: threads}, 0,
		cuda.Ptr(x.Ptr()), cuda.Ptr(wx.Ptr()), cuda.I32(ra), cuda.Ptr(y.Ptr()), cuda.Ptr(wy.Ptr()), cuda.I32(dim), cuda.F32(eps))
}

var _ kernels.PairRMSNormer = (*Backend)(nil)
