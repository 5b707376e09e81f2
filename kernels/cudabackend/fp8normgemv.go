//go:build cuda

package cudabackend

import (
	"os"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// The one-token FP8 q/k/v and gate·up·SiLU GEMVs with the RMSNorm in front
// of them folded in (kernels.FP8NormProjector; kernels/cuda/fp8gemvmma.cu's
// *_norm_mm2 and *_norm_mm4): each warp stages f16(x·nw) of its own
// columns of the F32 residual x, with its share of Σx², and the block
// multiplies its finished sums by the norm's 1/rms, so the norm costs no
// launch, no block barrier and no trip of h through memory, and the GEMV's
// first weight loads are issued while the o/down GEMV before it still
// runs. Only the tensor-core variants have these twins: where the variant
// for the launch is another (forced, or blocks of 16 or 32, or a GPU
// before sm_80), the ops decline and the decoder runs the norm and the
// plain FP8 GEMV. Backend.NoFP8FusedNorm (FT_FP8_FUSE_NORM=0) turns them
// off for A/B runs.

// noFP8FusedNormFromEnv is the default of Backend.NoFP8FusedNorm.
func noFP8FusedNormFromEnv() bool { return os.Getenv("FT_FP8_FUSE_NORM") == "0" }

var _ kernels.FP8NormProjector = (*Backend)(nil)

// fp8NormOperands checks the residual x (one F32 row of D values, 16-byte
// aligned) and the norm weight nw (BF16 [D], 16-byte aligned) of a folded
// FP8 GEMV: ok is whether the kernels take them (and the switch is on).
func (b *Backend) fp8NormOperands(x, nw *runtime.Tensor) (D int, ok bool) {
	if b.NoFP8FusedNorm || !b.here(x) || !b.here(nw) {
		return 0, false
	}
	D = x.Dim(-1)
	ok = x.DType() == runtime.F32 && x.NumElements() == D && D > 0 && nw.DType() == runtime.BF16 &&
		nw.NumElements() == D && aligned16(x.Ptr(), nw.Ptr())
	return D, ok
}

// NormMatMulNFP8 is kernels.FP8NormProjector's q/k/v on the GPU: one
// gemv3_fp8_norm_<variant> launch of RMSNorm(x) by three FP8 weights of
// width D with BF16 outputs and scales of one dtype; false (nothing
// launched) where the folded kernels do not take the operands.
func (b *Backend) NormMatMulNFP8(outs []*runtime.Tensor, x, nw *runtime.Tensor, eps float32, ws, scales []*runtime.Tensor, layout kernels.FP8Layout) (bool, error) {
	if len(outs) != 3 || len(ws) != 3 || len(scales) != 3 {
		return false, nil
	}
	D, ok := b.fp8NormOperands(x, nw)
	if !ok {
		return false, nil
	}
	ptrs := []uintptr{x.Ptr()}
	for i := range ws {
		if err := b.checkFP8Weight("NormMatMulNFP8", ws[i], scales[i], layout); err != nil {
			return false, err
		}
		if !b.here(outs[i]) || ws[i].Dim(1) != D || outs[i].DType() != runtime.BF16 || outs[i].NumElements() != ws[i].Dim(0) ||
			scales[i].DType() != scales[0].DType() {
			return false, nil
		}
		ptrs = append(ptrs, ws[i].Ptr())
	}
	shift, ok := b.fp8Fast(D, layout, ptrs...)
	if !ok {
		return false, nil
	}
	v := b.fp8GEMVs(fp8KindQKV, D, layout.Block)
	if v.gemv3Norm == nil {
		return false, nil
	}
	N0, N1, N2 := ws[0].Dim(0), ws[1].Dim(0), ws[2].Dim(0)
	grid, smem, ok, err := b.k.fp8.fp8Grid(v, v.gemv3Norm, N0+N1+N2, D)
	if !ok || err != nil {
		return false, err
	}
	bytes := int64(N0+N1+N2)*int64(D+2) + scales[0].NumBytes() + scales[1].NumBytes() + scales[2].NumBytes() + int64(D)*6
	return true, v.gemv3Norm.LaunchBytes(b.s, bytes, cuda.Dim3{X: grid}, cuda.Dim3{X: 256}, smem,
		cuda.Ptr(outs[0].Ptr()), cuda.Ptr(outs[1].Ptr()), cuda.Ptr(outs[2].Ptr()), cuda.Ptr(x.Ptr()),
		cuda.Ptr(ws[0].Ptr()), cuda.Ptr(ws[1].Ptr()), cuda.Ptr(ws[2].Ptr()),
		cuda.Ptr(scales[0].Ptr()), cuda.Ptr(scales[1].Ptr()), cuda.Ptr(scales[2].Ptr()), cuda.I32(int(scales[0].DType())),
		cuda.I32(N0), cuda.I32(N1), cuda.I32(N2), cuda.I32(D), cuda.I32(shift), cuda.I32(fp8Stride(D, layout)),
		cuda.Ptr(nw.Ptr()), cuda.F32(eps))
}

// NormGateUpSiLUFP8 is kernels.FP8NormProjector's gate·up·SiLU on the GPU:
// one gemv_gateup_silu_fp8_norm_<variant> launch; false (nothing launched)
// where the folded kernels do not take the operands.
func (b *Backend) NormGateUpSiLUFP8(out, x, nw *runtime.Tensor, eps float32, wg, wu, sg, su *runtime.Tensor, layout kernels.FP8Layout) (bool, error) {
	D, ok := b.fp8NormOperands(x, nw)
	if !ok {
		return false, nil
	}
	for _, p := range []struct {
		w, s *runtime.Tensor
	}{{wg, sg}, {wu, su}} {
		if err := b.checkFP8Weight("NormGateUpSiLUFP8", p.w, p.s, layout); err != nil {
			return false, err
		}
	}
	N := wg.Dim(0)
	if !wg.Shape().Equal(wu.Shape()) || wg.Dim(1) != D || !b.here(out) || out.DType() != runtime.BF16 || out.NumElements() != N ||
		sg.DType() != su.DType() {
		return false, nil
	}
	shift, ok := b.fp8Fast(D, layout, x.Ptr(), wg.Ptr(), wu.Ptr())
	if !ok {
		return false, nil
	}
	v := b.fp8GEMVs(fp8KindGateUp, D, layout.Block)
	if v.gateUpNorm == nil {
		return false, nil
	}
	grid, smem, ok, err := b.k.fp8.fp8Grid(v, v.gateUpNorm, N, D)
	if !ok || err != nil {
		return false, err
	}
	bytes := 2*int64(N)*int64(D) + sg.NumBytes() + su.NumBytes() + int64(D)*6 + int64(N)*2
	return true, v.gateUpNorm.LaunchBytes(b.s, bytes, cuda.Dim3{X: grid}, cuda.Dim3{X: 256}, smem,
		cuda.Ptr(out.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(wg.Ptr()), cuda.Ptr(wu.Ptr()), cuda.Ptr(sg.Ptr()), cuda.Ptr(su.Ptr()),
		cuda.I32(int(sg.DType())), cuda.I32(N), cuda.I32(D), cuda.I32(shift), cuda.I32(fp8Stride(D, layout)),
		cuda.Ptr(nw.Ptr()), cuda.F32(eps))
}
