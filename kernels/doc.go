// Package kernels holds the CPU reference kernels of the executor: slice-level
// operations on contiguous row-major float32 activations and weights stored as
// F32, BF16 or F16 (see Mat). Every kernel accumulates in float32 (or wider)
// whatever its weights' dtype.
//
// Dimension letters used in the doc comments:
//
//	m  rows of x (tokens)        k  inner (input) dimension
//	n  rows of w (outputs)       d  head dimension
//	t  token index               p  position in the KV cache
//
// Kernels run on several goroutines when the work is large enough to pay for
// the hand-off (see parallelFor) and inline otherwise, so a decode step of a
// tiny model is not dominated by scheduling. The helper goroutines
// (GOMAXPROCS−1 of them, as GOMAXPROCS was at the first large kernel) form
// one process-wide pool, started lazily by the first kernel that spreads
// its work and never stopped: they are not a leak, but a goroutine-leak
// check around a test that ran a model sees them. Size mismatches a caller can
// cause return errors naming the kernel and the sizes; the few kernels with
// no error result (SiLUMul, Add, the conversions) panic on mismatched
// lengths, which is a programming error.
package kernels
