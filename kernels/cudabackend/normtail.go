//go:build cuda

package cudabackend

import (
	"os"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// The one-token residual-accumulating GEMV with the RMSNorm after it done
// by its last block (kernels.MatMulAddNormer; kernels/cuda/normtail.cu's
// gemv_persist_f32acc_norm): y += W·x as gemv_persist_f32acc, then
// out = RMSNorm(y)·nw with the bits rmsnorm_f32in_bf16 writes, one launch
// instead of two. Backend.NormTail turns it on (FT_NORM_TAIL=1); off, the
// op declines and the decoder runs MatMulAdd and RMSNorm.

// normTailFromEnv is the default of Backend.NormTail: FT_NORM_TAIL=1; ""
// and "0" leave it off. Measured slower on the H200 (2026-12-01,
// bench/h200-s5c.sh, Llama-3-8B shape, context 512): a graph-replayed step
// of 4.76 ms against 4.33 ms, the last block's serial norm (about 6.7 µs a
// tail) costing more than the 3.6 µs launch it saves.
func normTailFromEnv() bool { return os.Getenv("FT_NORM_TAIL") == "1" }

// ensureTailCounter returns the device word gemv_persist_f32acc_norm counts
// its finished blocks in (the kernel leaves it 0). Made zeroed through the
// aux stream, synchronously, so legal while the compute stream captures;
// it never moves, so captured graphs stay valid.
func (b *Backend) ensureTailCounter() (uintptr, error) {
	if b.tailCounter != nil {
		return b.tailCounter.Ptr(), nil
	}
	const size = 256
	buf, err := b.dev.Alloc(size, "norm tail counter")
	if err != nil {
		return 0, err
	}
	if err := b.aux.Upload(buf.Ptr(), make([]byte, size)); err != nil {
		buf.Free()
		return 0, err
	}
	b.tailCounter = buf
	return buf.Ptr(), nil
}

// overlaps reports whether the bytes of a and b share an address.
func overlaps(a, b *runtime.Tensor) bool {
	return a.Ptr() < b.Ptr()+uintptr(b.NumBytes()) && b.Ptr() < a.Ptr()+uintptr(a.NumBytes())
}

// MatMulAddNorm: y[1,N] += x[1,D]·w[N,D]ᵀ and out[1,N] = RMSNorm(y)·nw in
// one gemv_persist_f32acc_norm launch (kernels.MatMulAddNormer). It
// declines (false, nothing enqueued) unless NormTail is set and the
// operands are those of the one-token MatMulAdd GEMV and of RMSNorm's F32
// kernel: one token, BF16 x and w with D % 8 == 0 and 16-byte alignment,
// an F32 y 16-byte aligned with N % 4 == 0, a BF16 out and nw of N values
// 4-byte aligned, out not overlapping y.
func (b *Backend) MatMulAddNorm(y, x, w, out, nw *runtime.Tensor, eps float32) (bool, error) {
	if !b.NormTail || y == nil || x == nil || w == nil || out == nil || nw == nil {
		return false, nil
	}
	for _, t := range []*runtime.Tensor{y, x, w, out, nw} {
		if !b.here(t) {
			return false, nil
		}
	}
	ws := w.Shape()
	if len(ws) != 2 || w.DType() != runtime.BF16 || x.DType() != runtime.BF16 || y.DType() != runtime.F32 ||
		out.DType() != runtime.BF16 || nw.DType() != runtime.BF16 {
		return false, nil
	}
	N, D := ws[0], ws[1]
	if D == 0 || D%8 != 0 || x.NumElements() != D || N == 0 || N%4 != 0 || y.NumElements() != N || out.NumElements() != N ||
		nw.NumElements() != N || !aligned16(x.Ptr(), w.Ptr(), y.Ptr()) || out.Ptr()%4 != 0 || nw.Ptr()%4 != 0 || overlaps(out, y) {
		return false, nil
	}
	cnt, err := b.ensureTailCounter()
	if err != nil {
		return false, err
	}
	f := b.k.gemvAccNorm
	grid := min(b.k.persistBlocks[f], (N+7)/8)
	bytes := gemvBytes(N, D, y) + int64(N)*4 + int64(N)*(4+2+2) // the add's read of y; the tail's y, nw and out
	return true, f.LaunchBytes(b.s, bytes, cuda.Dim3{X: grid}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(y.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(w.Ptr()), cuda.I32(N), cuda.I32(D),
		cuda.Ptr(out.Ptr()), cuda.Ptr(nw.Ptr()), cuda.F32(eps), cuda.I32(rmsF32Threads(N)), cuda.Ptr(cnt))
}

var _ kernels.MatMulAddNormer = (*Backend)(nil)
