//go:build cuda

package cudabackend

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// FP8GEMMMode is how MatMulFP8 multiplies several tokens by an FP8 weight
// with per-output-channel scales.
type FP8GEMMMode int

const (
	// FP8GEMMLt (the default) quantizes the activations to E4M3 per token
	// (quant_rows_e4m3: one scale per row, max|row|/448), multiplies the
	// codes on the FP8 tensor cores with cuBLASLt (fp32 accumulation,
	// partial sums promoted to fp32 periodically) and applies the token's
	// and the channel's scales (fp8_rescale): W8A8, about twice the BF16
	// GEMM's rate on an H200 and no dequantization pass. It runs when
	// cuBLASLt loads, the GPU is sm_89 or newer, the weight is per channel,
	// there are at least FP8GEMMMinTokens tokens, N and D are multiples of
	// 16 and the operands 16-byte aligned; otherwise, or for a shape
	// cuBLASLt has no algorithm for, FP8GEMMDequant runs.
	FP8GEMMLt FP8GEMMMode = iota
	// FP8GEMMLtFast is FP8GEMMLt with cuBLASLt's fast accumulation (the
	// tensor-core partial sums are never promoted to fp32): faster, less
	// accurate.
	FP8GEMMLtFast
	// FP8GEMMDequant dequantizes the weight to BF16 into a scratch buffer
	// and multiplies with cuBLAS (W8A16, the activations unquantized). The
	// block-wise layouts (weight_scale_inv per B×B block) always take it.
	FP8GEMMDequant
)

// String is the FT_FP8_GEMM value of the mode.
func (m FP8GEMMMode) String() string {
	switch m {
	case FP8GEMMLt:
		return "lt"
	case FP8GEMMLtFast:
		return "lt-fast"
	case FP8GEMMDequant:
		return "dequant"
	}
	return fmt.Sprintf("FP8GEMMMode(%d)", int(m))
}

// ParseFP8GEMMMode reads an FT_FP8_GEMM value: "" or "lt", "lt-fast",
// "dequant".
func ParseFP8GEMMMode(s string) (FP8GEMMMode, error) {
	switch s {
	case "", "lt":
		return FP8GEMMLt, nil
	case "lt-fast":
		return FP8GEMMLtFast, nil
	case "dequant":
		return FP8GEMMDequant, nil
	}
	return 0, fmt.Errorf("FT_FP8_GEMM=%q: want lt, lt-fast or dequant", s)
}

// DefaultFP8GEMMMinTokens is the fewest tokens a MatMulFP8 takes the FP8
// GEMM for by default: prefills and large decode batches. Below it the
// activations are not quantized (W8A16), so a few-token step computes what
// the one-token GEMV does.
const DefaultFP8GEMMMinTokens = 16

// fp8GemmFromEnv reads FT_FP8_GEMM and FT_FP8_GEMM_MIN_TOKENS; an unknown
// mode is an error naming the variable.
func fp8GemmFromEnv() (FP8GEMMMode, int, error) {
	mode, err := ParseFP8GEMMMode(os.Getenv("FT_FP8_GEMM"))
	if err != nil {
		return 0, 0, err
	}
	minTok := DefaultFP8GEMMMinTokens
	if s := os.Getenv("FT_FP8_GEMM_MIN_TOKENS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 2 {
			return 0, 0, fmt.Errorf("FT_FP8_GEMM_MIN_TOKENS=%q: want an integer ≥ 2", s)
		}
		minTok = n
	}
	return mode, minTok, nil
}

// fp8GemmKernels are the kernels of fp8gemm.cu.
type fp8GemmKernels struct {
	quant, rescale *cuda.Function
}

func loadFP8Gemm(get func(string) *cuda.Function) fp8GemmKernels {
	return fp8GemmKernels{quant: get("quant_rows_e4m3"), rescale: get("fp8_rescale")}
}

// fp8Lt is the FP8 GEMM path's scratch (the quantized activations and
// their scales) and what it has said.
type fp8Lt struct {
	buf      *runtime.DeviceBuffer
	noted    bool // the fallback to dequantization has been reported
	fallback error
}

// fp8ScaleOffset is where the per-token scales start in the scratch
// buffer: after the codes, 256-byte aligned.
func fp8ScaleOffset(T, D int) int64 { return (int64(T)*int64(D) + 255) / 256 * 256 }

// scratch returns the scratch buffer for T rows of D codes and T scales,
// growing it (the old one retired: a captured graph may still use it).
func (b *Backend) fp8Scratch(T, D int) (*runtime.DeviceBuffer, error) {
	need := fp8ScaleOffset(T, D) + 4*int64(T)
	if b.fp8lt.buf != nil && b.fp8lt.buf.Size() >= need {
		return b.fp8lt.buf, nil
	}
	if b.fp8lt.buf != nil {
		b.retired = append(b.retired, b.fp8lt.buf)
		b.fp8lt.buf = nil
	}
	buf, err := b.dev.Alloc(need, "fp8 activations quantized per token")
	if err != nil {
		return nil, err
	}
	b.fp8lt.buf = buf
	return buf, nil
}

// noteFP8Fallback says once, on stderr, why the FP8 GEMM does not run
// (the first reason met), so that a benchmark shows it.
func (b *Backend) noteFP8Fallback(err error) {
	if b.fp8lt.noted {
		return
	}
	b.fp8lt.noted, b.fp8lt.fallback = true, err
	fmt.Fprintf(os.Stderr, "flextensor: %s: FT_FP8_GEMM=%v falls back to dequantizing FP8 weights to BF16 + cuBLAS where the FP8 GEMM cannot run (said once; first reason: %v)\n", b.dev.Name(), b.FP8GEMM, err)
}

// FP8GEMMFallback is the first reason a MatMulFP8 that FP8GEMM chose for
// the FP8 GEMM ran the dequantizing path instead (cuBLASLt missing, a GPU
// before sm_89, a shape cuBLASLt refused), or nil.
func (b *Backend) FP8GEMMFallback() error { return b.fp8lt.fallback }

// matMulFP8Lt runs MatMulFP8 on the FP8 tensor cores when the mode, the
// layout and the shape allow (see FP8GEMMLt); ran is false, with a nil
// error, when the caller should take the dequantizing path instead.
// Arguments are checked by MatMulFP8.
func (b *Backend) matMulFP8Lt(out, x, w, scale *runtime.Tensor, layout kernels.FP8Layout, T, N, D int) (ran bool, err error) {
	minTok := b.FP8GEMMMinTokens
	if minTok <= 0 {
		minTok = DefaultFP8GEMMMinTokens
	}
	if b.FP8GEMM == FP8GEMMDequant || layout.Block != 0 || T < minTok || D%16 != 0 || N%16 != 0 ||
		!aligned16(x.Ptr(), w.Ptr(), out.Ptr()) {
		return false, nil
	}
	bf16 := out.DType() == runtime.BF16
	fast := b.FP8GEMM == FP8GEMMLtFast
	buf, err := b.fp8Scratch(T, D)
	if err != nil {
		return false, err
	}
	xq, xs := buf.Ptr(), buf.Ptr()+uintptr(fp8ScaleOffset(T, D))
	if err := b.blas.FP8Ready(out.Ptr(), bf16, xq, w.Ptr(), T, N, D, fast); err != nil {
		if errors.Is(err, cuda.ErrFP8Unsupported) {
			b.noteFP8Fallback(err)
			return false, nil
		}
		return false, err
	}
	if err := b.k.fp8gemm.quant.LaunchBytes(b.s, int64(T)*int64(D)*3+4*int64(T), cuda.Dim3{X: T}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(xq), cuda.Ptr(xs), cuda.Ptr(x.Ptr()), cuda.I32(D)); err != nil {
		return false, err
	}
	if err := b.blas.GemmFP8(b.s, out.Ptr(), bf16, xq, w.Ptr(), T, N, D, fast); err != nil {
		if errors.Is(err, cuda.ErrFP8Unsupported) { // refused at the call: nothing ran
			b.noteFP8Fallback(err)
			return false, nil
		}
		return false, err
	}
	outF32 := 0
	if !bf16 {
		outF32 = 1
	}
	n := int64(T) * int64(N)
	return true, b.k.fp8gemm.rescale.LaunchBytes(b.s, 2*n*int64(out.DType().Size())+scale.NumBytes()+4*int64(T),
		cuda.Dim3{X: b.gridFor(n / 8)}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(out.Ptr()), cuda.I32(outF32), cuda.Ptr(xs), cuda.Ptr(scale.Ptr()), cuda.I32(int(scale.DType())), cuda.I32(T), cuda.I32(N))
}
