//go:build cuda

package cudabackend

import (
	"fmt"
	"math"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

var _ kernels.MoEKernels = (*Backend)(nil)

// moeKernels are the mixture-of-experts row ops (moe.cu).
type moeKernels struct {
	gather, scatterAdd *cuda.Function
}

// loadMoE looks the MoE kernels up in the compiled module.
func loadMoE(get func(string) *cuda.Function) moeKernels {
	return moeKernels{gather: get("moe_gather_rows_u16"), scatterAdd: get("moe_scatter_add_f32")}
}

// moeMeta are the per-call row tables of the MoE ops on the device: the
// gather's rows, the scatter's rows and weights (one upload each, skipped
// for a single row, which travels as a kernel argument).
type moeMeta struct{ rows, scatter metaUpload }

func (m *moeMeta) free() {
	for _, u := range []*metaUpload{&m.rows, &m.scatter} {
		u.dev.Free()
		u.stage.Free()
		*u = metaUpload{}
	}
}

// moeRows checks a row op's tensors: rows of one width, n = len(rows)
// indices into the R rows of the indexed tensor.
func moeRows(op string, indexed, packed *runtime.Tensor, rows []int32) (width int, err error) {
	if len(indexed.Shape()) == 0 || len(packed.Shape()) == 0 || indexed.Dim(-1) == 0 || indexed.Dim(-1) != packed.Dim(-1) {
		return 0, fmt.Errorf("cudabackend.%s: %v and %v are not rows of one width", op, indexed.Shape(), packed.Shape())
	}
	W := indexed.Dim(-1)
	R, n := indexed.NumElements()/W, packed.NumElements()/W
	if len(rows) != n {
		return 0, fmt.Errorf("cudabackend.%s: %d row indices for %d rows", op, len(rows), n)
	}
	for i, r := range rows {
		if r < 0 || int(r) >= R {
			return 0, fmt.Errorf("cudabackend.%s: row index %d at %d is outside 0..%d", op, r, i, R-1)
		}
	}
	return W, nil
}

// GatherRows: dst[i,:] = src[rows[i],:] for BF16 (or F32) rows
// (kernels.MoEKernels). One row is a kernel argument; more are uploaded.
func (b *Backend) GatherRows(dst, src *runtime.Tensor, rows []int32) error {
	if err := b.actOrF32("GatherRows", "src", src); err != nil {
		return err
	}
	if err := b.onDevice("GatherRows", "dst", dst); err != nil {
		return err
	}
	if dst.DType() != src.DType() {
		return fmt.Errorf("cudabackend.GatherRows: dst is %v, src %v", dst.DType(), src.DType())
	}
	W, err := moeRows("GatherRows", src, dst, rows)
	if err != nil || len(rows) == 0 {
		return err
	}
	units := W * src.DType().Size() / 2
	var table uintptr
	row0 := int(rows[0])
	if len(rows) > 1 {
		if table, err = b.uploadMeta(&b.moe.rows, rows, "expert rows"); err != nil {
			return err
		}
	}
	return b.k.moe.gather.Launch(b.s, cuda.Dim3{X: len(rows)}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(dst.Ptr()), cuda.Ptr(src.Ptr()), cuda.Ptr(table), cuda.I32(row0), cuda.I32(units))
}

// ScatterAddRows: dst[rows[i],:] += weights[i]·src[i,:] for F32 rows
// (kernels.MoEKernels). One row and its weight are kernel arguments; more
// are uploaded together.
func (b *Backend) ScatterAddRows(dst, src *runtime.Tensor, rows []int32, weights []float32) error {
	for _, x := range []struct {
		name string
		t    *runtime.Tensor
	}{{"dst", dst}, {"src", src}} {
		if err := b.onDevice("ScatterAddRows", x.name, x.t); err != nil {
			return err
		}
		if x.t.DType() != runtime.F32 {
			return fmt.Errorf("cudabackend.ScatterAddRows: %s is %v, want F32", x.name, x.t.DType())
		}
	}
	W, err := moeRows("ScatterAddRows", dst, src, rows)
	if err != nil {
		return err
	}
	if len(weights) != len(rows) {
		return fmt.Errorf("cudabackend.ScatterAddRows: %d weights for %d rows", len(weights), len(rows))
	}
	if len(rows) == 0 {
		return nil
	}
	var rowp, wp uintptr
	if n := len(rows); n > 1 {
		vals := make([]int32, 2*n)
		copy(vals, rows)
		for i, w := range weights {
			vals[n+i] = int32(math.Float32bits(w))
		}
		p, err := b.uploadMeta(&b.moe.scatter, vals, "expert rows and weights")
		if err != nil {
			return err
		}
		rowp, wp = p, p+uintptr(4*n)
	}
	return b.k.moe.scatterAdd.Launch(b.s, cuda.Dim3{X: len(rows)}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(dst.Ptr()), cuda.Ptr(src.Ptr()), cuda.Ptr(rowp), cuda.Ptr(wp), cuda.I32(int(rows[0])), cuda.F32(weights[0]), cuda.I32(W))
}

// Zero: t = 0 (kernels.MoEKernels), a memset on the compute stream.
func (b *Backend) Zero(t *runtime.Tensor) error {
	if err := b.onDevice("Zero", "t", t); err != nil {
		return err
	}
	n := t.NumBytes()
	switch {
	case n == 0:
		return nil
	case n%4 == 0:
		return b.s.MemsetD32(t.Ptr(), 0, n/4)
	case n%2 == 0:
		return b.s.MemsetD16(t.Ptr(), 0, n/2)
	}
	return fmt.Errorf("cudabackend.Zero: %v is not a whole number of 16-bit words", t)
}
