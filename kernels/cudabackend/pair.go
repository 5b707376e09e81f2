//go:build cuda

package cudabackend

import (
	"fmt"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

var _ kernels.PairMatMuler = (*Backend)(nil)

// MatMulPair computes outA = x·wAᵀ and outB = x·wBᵀ for BF16 weights of one
// shape [N,D]: for several tokens in one strided-batched cuBLAS GEMM
// (BLAS.GemmBF16Pair), else (one token: the GEMVs; other weight types) as
// two MatMul calls.
func (b *Backend) MatMulPair(outA, outB, x, wA, wB *runtime.Tensor) error {
	if !sameShape(wA.Shape(), wB.Shape()) {
		return fmt.Errorf("cudabackend.MatMulPair: weights %v and %v differ in shape", wA.Shape(), wB.Shape())
	}
	if outA.DType() != outB.DType() || !sameShape(outA.Shape(), outB.Shape()) {
		return fmt.Errorf("cudabackend.MatMulPair: outputs %v %v and %v %v differ", outA.DType(), outA.Shape(), outB.DType(), outB.Shape())
	}
	ws := wA.Shape()
	if len(ws) != 2 || wA.DType() != runtime.BF16 || wB.DType() != runtime.BF16 || x.DType() != runtime.BF16 ||
		ws[1] == 0 || x.NumElements()%ws[1] != 0 || x.NumElements()/ws[1] < 2 {
		if err := b.MatMul(outA, x, wA); err != nil {
			return err
		}
		return b.MatMul(outB, x, wB)
	}
	for _, c := range []struct {
		name string
		t    *runtime.Tensor
	}{{"wA", wA}, {"wB", wB}} {
		if err := b.weight("MatMulPair", c.name, c.t); err != nil {
			return err
		}
	}
	if err := b.act("MatMulPair", "x", x); err != nil {
		return err
	}
	for _, c := range []struct {
		name string
		t    *runtime.Tensor
	}{{"outA", outA}, {"outB", outB}} {
		if err := b.onDevice("MatMulPair", c.name, c.t); err != nil {
			return err
		}
	}
	if outA.DType() != runtime.BF16 && outA.DType() != runtime.F32 {
		return fmt.Errorf("cudabackend.MatMulPair: out is %v, want BF16 or F32", outA.DType())
	}
	N, D := ws[0], ws[1]
	T := x.NumElements() / D
	if outA.NumElements() != T*N {
		return fmt.Errorf("cudabackend.MatMulPair: out %v, want %d×%d", outA.Shape(), T, N)
	}
	if N == 0 {
		return nil
	}
	return b.blas.GemmBF16Pair(b.s, outA.Ptr(), outB.Ptr(), outA.DType() == runtime.BF16, x.Ptr(), wA.Ptr(), wB.Ptr(), T, N, D)
}

// sameShape reports whether a and b are the same shape.
func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
