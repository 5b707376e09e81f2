package kernels

import "github.com/flextensor-go/flextensor/runtime"

// ResidualNormer moves a large forward's attention residual add out of the
// output projection's GEMM: instead of x += O·att inside the GEMM
// (MatMulAdder: an fp32 read and write of x in its epilogue), the
// projection writes y = O·att in the activation dtype and AddBF16RMSNorm
// adds it to x in the kernel that normalises x for the MLP. An A/B switch
// for long prefills (the values differ from MatMulAdd by y's rounding to
// bf16, as in a model whose residual stream is bf16).
type ResidualNormer interface {
	// ResidualViaNorm reports whether a forward of T tokens with rows of
	// dim values should take this path (AddBF16RMSNorm then takes its
	// rows).
	ResidualViaNorm(T, dim int) bool
	// AddBF16RMSNorm sets x[T,D] += y (F32 x, BF16 y) and out =
	// RMSNorm(x)·w (BF16 out, w); out may be y.
	AddBF16RMSNorm(out, x, y, w *runtime.Tensor, eps float32) error
}
