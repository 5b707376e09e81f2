//go:build cuda

package cudabackend

import (
	"fmt"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

var _ kernels.FP8MatMuler = (*Backend)(nil)

// MatMulFP8 is kernels.FP8MatMuler on the GPU, weight-only (W8A16): out[T,N]
// = x[T,D]·dequant(w, scale)ᵀ for an F8_E4M3 weight w[N,D] with scales per
// output row or per block (F32, F16 or BF16), x BF16, out BF16 or F32, fp32
// accumulation.
//
// One token (decode) runs gemv_fp8_v (fp8gemv.go), which streams the FP8
// bytes (half a BF16 weight's) and widens them with the hardware
// conversion, when D is a multiple of 16, the block size (if any) a power
// of two of at least 16 and x and w 16-byte aligned; else gemv_fp8 when
// D and the block size are multiples of 16. Several tokens with
// per-channel scales take the FP8 tensor-core GEMM (W8A8: activations
// quantized per token, cuBLASLt; see FP8GEMMLt in fp8gemm.go) when
// b.FP8GEMM and the shape allow. Otherwise (block scales, few tokens, an
// odd shape, FT_FP8_GEMM=dequant, no cuBLASLt) the weight is dequantized
// to BF16 into a scratch buffer (dequant_fp8_bf16_v16 where it applies)
// and multiplied with cuBLAS.
func (b *Backend) MatMulFP8(out, x, w, scale *runtime.Tensor, layout kernels.FP8Layout) error {
	if err := b.onDevice("MatMulFP8", "w", w); err != nil {
		return err
	}
	if err := b.onDevice("MatMulFP8", "scale", scale); err != nil {
		return err
	}
	if err := kernels.CheckFP8(w, scale, layout); err != nil {
		return err
	}
	if w.DType() != runtime.F8E4M3 {
		return fmt.Errorf("cudabackend.MatMulFP8: weight %v is %v; the CUDA kernels take F8_E4M3", w.Shape(), w.DType())
	}
	if err := b.act("MatMulFP8", "x", x); err != nil {
		return err
	}
	if err := b.onDevice("MatMulFP8", "out", out); err != nil {
		return err
	}
	if out.DType() != runtime.BF16 && out.DType() != runtime.F32 {
		return fmt.Errorf("cudabackend.MatMulFP8: out is %v, want BF16 or F32", out.DType())
	}
	N, D := w.Dim(0), w.Dim(1)
	if D == 0 || x.NumElements()%D != 0 {
		return fmt.Errorf("cudabackend.MatMulFP8: x %v does not have rows of w's %d columns (w %v)", x.Shape(), D, w.Shape())
	}
	T := x.NumElements() / D
	if out.NumElements() != T*N {
		return fmt.Errorf("cudabackend.MatMulFP8: out %v, want %d×%d", out.Shape(), T, N)
	}
	if T == 0 || N == 0 {
		return nil
	}
	blk, sstride := layout.Block, 0
	if blk > 0 {
		sstride = (D + blk - 1) / blk
	}
	f32 := out.DType() == runtime.F32
	if T == 1 {
		if handled, err := b.gemvFP8V(out, x, w, scale, layout, false); handled || err != nil {
			return err
		}
	}
	outF32 := 0
	if f32 {
		outF32 = 1
	}
	sdt := int(scale.DType())
	if T == 1 && D%16 == 0 && blk%16 == 0 && aligned16(x.Ptr(), w.Ptr()) {
		f := b.k.gemvFP8
		bytes := int64(N)*int64(D) + scale.NumBytes() + int64(D)*2 + int64(N)*int64(out.DType().Size())
		return f.LaunchBytes(b.s, bytes, cuda.Dim3{X: min(b.k.persistBlocks[f], (N+7)/8)}, cuda.Dim3{X: 256}, 0,
			cuda.Ptr(out.Ptr()), cuda.I32(outF32), cuda.Ptr(x.Ptr()), cuda.Ptr(w.Ptr()), cuda.Ptr(scale.Ptr()), cuda.I32(sdt),
			cuda.I32(N), cuda.I32(D), cuda.I32(blk), cuda.I32(sstride))
	}
	if ran, err := b.matMulFP8Lt(out, x, w, scale, layout, T, N, D); ran || err != nil {
		return err
	}
	return b.matMulFP8Dequant(out, x, w, scale, layout, T, N, D)
}

// matMulFP8Dequant is MatMulFP8's path for several tokens without the FP8
// GEMM: the weight dequantized to BF16 into a scratch buffer, then cuBLAS.
// Arguments are checked by the callers.
func (b *Backend) matMulFP8Dequant(out, x, w, scale *runtime.Tensor, layout kernels.FP8Layout, T, N, D int) error {
	return b.matMulFP8DequantAdd(out, x, w, scale, layout, T, N, D, false)
}

// matMulFP8DequantAdd is matMulFP8Dequant; with add (out F32) the GEMM
// adds its product into out (beta 1) instead of writing it.
func (b *Backend) matMulFP8DequantAdd(out, x, w, scale *runtime.Tensor, layout kernels.FP8Layout, T, N, D int, add bool) error {
	f32 := out.DType() == runtime.F32
	need := int64(N) * int64(D) * 2
	if b.deq == nil || b.deq.Size() < need {
		if b.deq != nil {
			b.retired = append(b.retired, b.deq) // a captured graph may still read it
			b.deq = nil
		}
		buf, err := b.dev.Alloc(need, "fp8 weight dequantized")
		if err != nil {
			return err
		}
		b.deq = buf
	}
	if err := b.dequantFP8(b.deq.Ptr(), w, scale, layout); err != nil {
		return err
	}
	return b.gemm(out.Ptr(), !f32, x.Ptr(), b.deq.Ptr(), T, N, D, add && f32)
}
