//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// SampleRows draws dst[r] from row r of x[R,V] at inverse temperature
// invT[r] with the uniform draw u[r] (kernels.DeviceSampler): one int a row
// comes back instead of V logits.
func (b *Backend) SampleRows(dst []int32, x *runtime.Tensor, invT, u []float32) error {
	if err := b.onDevice("SampleRows", "x", x); err != nil {
		return err
	}
	if x.DType() != runtime.F32 && x.DType() != runtime.BF16 {
		return fmt.Errorf("cudabackend.SampleRows: x is %v, want F32 or BF16", x.DType())
	}
	V := x.Dim(-1)
	if V == 0 || x.NumElements()/V != len(dst) || len(invT) != len(dst) || len(u) != len(dst) {
		return fmt.Errorf("cudabackend.SampleRows: x %v, %d outputs, %d temperatures, %d draws: want one of each per row", x.Shape(), len(dst), len(invT), len(u))
	}
	if len(dst) == 0 {
		return nil
	}
	vals := make([]int32, 0, 2*len(dst))
	for _, v := range invT {
		if !(v > 0) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("cudabackend.SampleRows: inverse temperature %v, want a finite positive number", v)
		}
		vals = append(vals, int32(math.Float32bits(v)))
	}
	for _, v := range u {
		if !(v >= 0 && v < 1) {
			return fmt.Errorf("cudabackend.SampleRows: draw %v outside [0, 1)", v)
		}
		vals = append(vals, int32(math.Float32bits(v)))
	}
	params, err := b.uploadMeta(&b.sampleMeta, vals, "sampling parameters")
	if err != nil {
		return err
	}
	need := int64(4 * len(dst))
	if b.argOut == nil || b.argOut.Size() < need {
		if b.argOut != nil {
			b.retired = append(b.retired, b.argOut)
			b.argOut = nil
		}
		buf, err := b.dev.Alloc(max(need, 4096), "argmax results")
		if err != nil {
			return err
		}
		b.argOut = buf
	}
	if err := b.k.sample.Launch(b.s, cuda.Dim3{X: len(dst)}, cuda.Dim3{X: 1024}, 0,
		cuda.Ptr(b.argOut.Ptr()), cuda.Ptr(x.Ptr()), cuda.I32(int(x.DType())), cuda.I32(V),
		cuda.Ptr(params), cuda.Ptr(params+uintptr(4*len(dst)))); err != nil {
		return err
	}
	return b.s.Download(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), need), b.argOut.Ptr())
}

var _ kernels.DeviceSampler = (*Backend)(nil)
