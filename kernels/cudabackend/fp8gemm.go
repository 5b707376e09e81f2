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

// fp8GemmKernels are the kernels of fp8gemm.cu and fp8mlp.cu.
type fp8GemmKernels struct {
	quant, rescale *cuda.Function
	// siluQuant and rescaleAdd are the fused FP8 MLP's (fp8mlp.go).
	siluQuant, rescaleAdd *cuda.Function
}

func loadFP8Gemm(get func(string) *cuda.Function) fp8GemmKernels {
	return fp8GemmKernels{quant: get("quant_rows_e4m3"), rescale: get("fp8_rescale"),
		siluQuant: get("fp8_silu_quant_rows"), rescaleAdd: get("fp8_rescale_add")}
}

// fp8Lt is the FP8 GEMM path's scratch (the quantized activations, their
// scales and the weights' scales in fp32) and what it has said.
type fp8Lt struct {
	buf      *runtime.DeviceBuffer
	noted    bool // the fallback to dequantization has been reported
	fallback error
	// outerErr is the first reason a GEMM that could have applied the
	// scales in cuBLASLt ran fp8_rescale instead (nil: none yet).
	outerErr error
}

// fp8ScaleOffset is where the per-token scales start in the scratch
// buffer: after the codes, 256-byte aligned.
func fp8ScaleOffset(T, D int) int64 { return (int64(T)*int64(D) + 255) / 256 * 256 }

// fp8WScaleOffset is where the weights' fp32 scales start in the scratch
// buffer: after the T token scales, 256-byte aligned.
func fp8WScaleOffset(T, D int) int64 { return (fp8ScaleOffset(T, D) + 4*int64(T) + 255) / 256 * 256 }

// fp8Scratch returns the scratch buffer for T rows of D codes, T scales
// and nw weight scales, growing it (the old one retired: a captured graph
// may still use it) to at least twice its size, so that prompts growing a
// little at a time retire less than the final buffer in all.
func (b *Backend) fp8Scratch(T, D, nw int) (*runtime.DeviceBuffer, error) {
	need := fp8WScaleOffset(T, D) + 4*int64(nw)
	if b.fp8lt.buf != nil && b.fp8lt.buf.Size() >= need {
		return b.fp8lt.buf, nil
	}
	size := need
	if b.fp8lt.buf != nil {
		size = max(size, 2*b.fp8lt.buf.Size())
		b.retired = append(b.retired, b.fp8lt.buf)
		b.fp8lt.buf = nil
	}
	buf, err := b.dev.Alloc(size, "fp8 activations quantized per token")
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

// FP8GEMMRescaleReason is the first reason an FP8 GEMM applied the scales
// with fp8_rescale rather than in cuBLASLt (FP8LtRescale set, cuBLASLt
// before 12.9, a GPU other than sm_90, a shape the heuristic refused with
// outer-vector scales), or nil.
func (b *Backend) FP8GEMMRescaleReason() error { return b.fp8lt.outerErr }

// noteOuter records why the scales were not folded into cuBLASLt (the
// first reason; said on stderr under FT_TRACE=1).
func (b *Backend) noteOuter(err error) {
	if b.fp8lt.outerErr != nil {
		return
	}
	b.fp8lt.outerErr = err
	if os.Getenv("FT_TRACE") == "1" {
		fmt.Fprintf(os.Stderr, "trace: %s: FP8 GEMM scales applied by fp8_rescale: %v\n", b.dev.Name(), err)
	}
}

var errRescaleForced = errors.New("FP8LtRescale is set")

// fp8LtApplies reports whether the FP8 GEMM path may take T tokens of
// width D for weights of this layout (mode, layout, token count, D and the
// alignment of x); the weights' own checks are in matMulFP8LtN.
func (b *Backend) fp8LtApplies(layout kernels.FP8Layout, T, D int, x uintptr) bool {
	minTok := b.FP8GEMMMinTokens
	if minTok <= 0 {
		minTok = DefaultFP8GEMMMinTokens
	}
	return b.FP8GEMM != FP8GEMMDequant && layout.Block == 0 && T >= minTok && D%16 == 0 && aligned16(x)
}

// FusesFP8Rows is kernels.FP8RowsFuser: MatMulNFP8 and GateUpSiLUFP8 of
// rows tokens quantize the shared activations once for the FP8 GEMMs when
// FP8GEMM takes that many tokens on the tensor cores.
func (b *Backend) FusesFP8Rows(rows int) bool {
	minTok := b.FP8GEMMMinTokens
	if minTok <= 0 {
		minTok = DefaultFP8GEMMMinTokens
	}
	return b.FP8GEMM != FP8GEMMDequant && rows >= minTok
}

// matMulFP8Lt runs MatMulFP8 on the FP8 tensor cores when the mode, the
// layout and the shape allow (see FP8GEMMLt); ran is false, with a nil
// error, when the caller should take the dequantizing path instead.
// Arguments are checked by MatMulFP8.
func (b *Backend) matMulFP8Lt(out, x, w, scale *runtime.Tensor, layout kernels.FP8Layout, T, N, D int) (ran bool, err error) {
	return b.matMulFP8LtN([]*runtime.Tensor{out}, x, []*runtime.Tensor{w}, []*runtime.Tensor{scale}, layout, T, D)
}

// matMulFP8LtN is matMulFP8Lt for several weights that share x[T,D]
// (q, k, v; gate, up): x is quantized once (quant_rows_e4m3) and each
// product runs on the FP8 tensor cores, with the token's and the channel's
// scales applied by cuBLASLt (sm_90, cuBLASLt 12.9+, unless FP8LtRescale)
// or by fp8_rescale. ran is false, with nothing enqueued, when any of them
// cannot take the FP8 GEMM (the caller then runs each as MatMulFP8); a
// product cuBLASLt refuses at the call, after the others ran, is
// dequantized. outs must be BF16 or F32 [T,N_i], ws F8_E4M3 [N_i,D] with
// per-channel scales (checked by the callers).
func (b *Backend) matMulFP8LtN(outs []*runtime.Tensor, x *runtime.Tensor, ws, scales []*runtime.Tensor, layout kernels.FP8Layout, T, D int) (ran bool, err error) {
	if !b.fp8LtApplies(layout, T, D, x.Ptr()) {
		return false, nil
	}
	fast := b.FP8GEMM == FP8GEMMLtFast
	for i, w := range ws {
		if w.Dim(0)%16 != 0 || !aligned16(w.Ptr(), outs[i].Ptr()) {
			return false, nil
		}
	}
	// The scales in cuBLASLt: each weight's fp32 vector, the scale tensor
	// itself when it is F32 and aligned, else converted into the scratch
	// by the quantizing launch (up to three weights of one scale dtype).
	outer := !b.FP8LtRescale
	if outer {
		if err := b.blas.FP8OuterScales(); err != nil {
			b.noteOuter(err)
			outer = false
		}
	} else {
		b.noteOuter(errRescaleForced)
	}
	wsf := make([]int64, len(ws)) // offset in the converted block, or -1: the tensor itself; -2: none (rescale)
	var conv []*runtime.Tensor
	nconv := 0
	for i, sc := range scales {
		switch {
		case !outer:
			wsf[i] = -2
		case sc.DType() == runtime.F32 && aligned16(sc.Ptr()):
			wsf[i] = -1
		case len(conv) < 3 && (len(conv) == 0 || conv[0].DType() == sc.DType()):
			wsf[i] = int64(nconv)
			conv = append(conv, sc)
			nconv += ws[i].Dim(0)
		default:
			wsf[i] = -2
		}
	}
	buf, err := b.fp8Scratch(T, D, nconv)
	if err != nil {
		return false, err
	}
	xq, xs := buf.Ptr(), buf.Ptr()+uintptr(fp8ScaleOffset(T, D))
	wbase := buf.Ptr() + uintptr(fp8WScaleOffset(T, D))
	for i, w := range ws {
		if err := b.blas.FP8Ready(outs[i].Ptr(), outs[i].DType() == runtime.BF16, xq, w.Ptr(), T, w.Dim(0), D, fast); err != nil {
			if errors.Is(err, cuda.ErrFP8Unsupported) {
				b.noteFP8Fallback(err)
				return false, nil
			}
			return false, err
		}
	}
	// quant_rows_e4m3: T row blocks, then blocks converting the scales.
	var cp [3]uintptr
	var cn [3]int
	sdt := 0
	for j, sc := range conv {
		cp[j], cn[j] = sc.Ptr(), sc.NumElements()
		sdt = int(sc.DType())
	}
	extra := 0
	if nconv > 0 {
		extra = min((nconv+255)/256, 64)
	}
	var convBytes int64
	for _, sc := range conv {
		convBytes += sc.NumBytes() + 4*int64(sc.NumElements())
	}
	if err := b.k.fp8gemm.quant.LaunchBytes(b.s, int64(T)*int64(D)*3+4*int64(T)+convBytes, cuda.Dim3{X: T + extra}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(xq), cuda.Ptr(xs), cuda.Ptr(x.Ptr()), cuda.I32(T), cuda.I32(D), cuda.Ptr(wbase),
		cuda.Ptr(cp[0]), cuda.Ptr(cp[1]), cuda.Ptr(cp[2]), cuda.I32(sdt), cuda.I32(cn[0]), cuda.I32(cn[1]), cuda.I32(cn[2])); err != nil {
		return false, err
	}
	for i, w := range ws {
		out, N := outs[i], w.Dim(0)
		bf16 := out.DType() == runtime.BF16
		if wsf[i] != -2 {
			sw := scales[i].Ptr()
			if wsf[i] >= 0 {
				sw = wbase + uintptr(4*wsf[i])
			}
			err := b.blas.FP8ScaledReady(out.Ptr(), bf16, xq, w.Ptr(), xs, sw, T, N, D, fast)
			if err == nil {
				err = b.blas.GemmFP8Scaled(b.s, out.Ptr(), bf16, xq, w.Ptr(), xs, sw, T, N, D, fast)
			}
			if err == nil {
				continue
			}
			if !errors.Is(err, cuda.ErrFP8Unsupported) {
				return true, err
			}
			b.noteOuter(err) // refused before enqueuing: rescale below
		}
		if err := b.blas.GemmFP8(b.s, out.Ptr(), bf16, xq, w.Ptr(), T, N, D, fast); err != nil {
			if !errors.Is(err, cuda.ErrFP8Unsupported) {
				return true, err
			}
			// Refused at the call, nothing ran for this weight.
			b.noteFP8Fallback(err)
			if err := b.matMulFP8Dequant(out, x, w, scales[i], layout, T, N, D); err != nil {
				return true, err
			}
			continue
		}
		outF32 := 0
		if !bf16 {
			outF32 = 1
		}
		n := int64(T) * int64(N)
		if err := b.k.fp8gemm.rescale.LaunchBytes(b.s, 2*n*int64(out.DType().Size())+scales[i].NumBytes()+4*int64(T),
			cuda.Dim3{X: b.gridFor(n / 8)}, cuda.Dim3{X: 256}, 0,
			cuda.Ptr(out.Ptr()), cuda.I32(outF32), cuda.Ptr(xs), cuda.Ptr(scales[i].Ptr()), cuda.I32(int(scales[i].DType())), cuda.I32(T), cuda.I32(N)); err != nil {
			return true, err
		}
	}
	return true, nil
}
