package kernels

import "github.com/flextensor-go/flextensor/runtime"

// PairMatMuler is a backend that multiplies one input by two weights of
// the same shape in one launch: outA = x·wAᵀ and outB = x·wBᵀ, the results
// of two MatMul calls. A batched step's k and v projections take it; a
// backend makes the two calls itself where one launch does not apply.
type PairMatMuler interface {
	MatMulPair(outA, outB, x, wA, wB *runtime.Tensor) error
}
