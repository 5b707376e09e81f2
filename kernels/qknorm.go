package kernels

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// PairRMSNormer is implemented by backends that normalise two tensors' rows
// in one op: a layer's per-head q and k norms (Qwen3), each of which is a
// tiny launch of its own.
type PairRMSNormer interface {
	// PairRMSNorm sets, in place, a[r,:] = RMSNorm(a[r,:])·wa and
	// b[r,:] = RMSNorm(b[r,:])·wb (rows of a's and b's last dimension, one
	// eps), with the values two RMSNorm calls would give.
	PairRMSNorm(a, wa, b, wb *runtime.Tensor, eps float32) error
}

// PairRMSNorm is the reference: two in-place RMSNorms.
func (c *CPUBackend) PairRMSNorm(a, wa, b, wb *runtime.Tensor, eps float32) error {
	if a == nil || wa == nil || b == nil || wb == nil {
		return fmt.Errorf("kernels.PairRMSNorm: a nil tensor")
	}
	if err := c.RMSNorm(a, a, wa, eps); err != nil {
		return err
	}
	return c.RMSNorm(b, b, wb, eps)
}

var _ PairRMSNormer = (*CPUBackend)(nil)
