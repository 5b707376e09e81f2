//go:build cuda

package cudabackend

import (
	"fmt"
	"os"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// A one-token step's FP8 q/k/v GEMV with RoPE and the KV-cache store in its
// epilogue (kernels.FP8QKVRoPEStorer; kernels/cuda/fp8gemvmma.cu's
// gemv3_fp8_rope_mm2 and, with the RMSNorm folded in as well,
// gemv3_fp8_rope_norm_mm2): one launch instead of the q/k/v GEMV and
// rope_store_bf16, with their bits (the GEMV's tiles pair each q and k row
// with its rotary partner). Where the q/k/v variant for the launch is not
// mm2 (forced, or scales the tensor cores do not take), the heads' width
// is not a multiple of 16, or the projections have biases, it declines and
// the decoder runs the two ops. Backend.NoFP8FusedRoPE (FT_FP8_FUSE_ROPE=0)
// turns it off for A/B runs.

// noFP8FusedRoPEFromEnv is the default of Backend.NoFP8FusedRoPE.
func noFP8FusedRoPEFromEnv() bool { return os.Getenv("FT_FP8_FUSE_ROPE") == "0" }

var _ kernels.FP8QKVRoPEStorer = (*Backend)(nil)

// ProjectRoPEStoreKVFP8 runs a one-token step's FP8 q/k/v projections
// (with the norm folded in where a.Norm is set), RoPE and KV store as one
// launch (kernels.FP8QKVRoPEStorer). It declines (false, nothing enqueued)
// where the kernels do not take the operands; wrong shapes are an error.
func (b *Backend) ProjectRoPEStoreKVFP8(a kernels.FP8QKVRoPE) (bool, error) {
	if b.NoFP8FusedRoPE {
		return false, nil
	}
	H, KV, d, err := a.Check()
	if err != nil {
		return false, fmt.Errorf("cudabackend: %w", err)
	}
	for _, t := range []*runtime.Tensor{a.Q, a.K, a.V, a.KCache, a.VCache} {
		if !b.here(t) || t.DType() != runtime.BF16 {
			return false, nil
		}
	}
	D := a.X.Dim(-1)
	if a.Norm != nil {
		if _, ok := b.fp8NormOperands(a.X, a.Norm); !ok {
			return false, nil
		}
	} else if !b.here(a.X) || a.X.DType() != runtime.BF16 {
		return false, nil
	}
	for _, p := range []struct{ w, s *runtime.Tensor }{{a.WQ, a.SQ}, {a.WK, a.SK}, {a.WV, a.SV}} {
		if err := b.checkFP8Weight("ProjectRoPEStoreKVFP8", p.w, p.s, a.Layout); err != nil {
			return false, err
		}
		if p.s.DType() != a.SQ.DType() {
			return false, nil
		}
	}
	if d%16 != 0 {
		return false, nil
	}
	shift, ok := b.fp8Fast(D, a.Layout, a.X.Ptr(), a.WQ.Ptr(), a.WK.Ptr(), a.WV.Ptr())
	if !ok {
		return false, nil
	}
	v := b.fp8GEMVs(fp8KindQKV, D, a.Layout.Block)
	if v != b.k.fp8.variants["mm2"] {
		return false, nil
	}
	f := b.k.fp8.rope
	if a.Norm != nil {
		f = b.k.fp8.ropeNorm
	}
	rows := (H + 2*KV) * d
	grid, smem, ok, err := b.k.fp8.fp8Grid(v, f, rows, D)
	if !ok || err != nil {
		return false, err
	}
	tab, err := b.ropeTable(a.InvFreq)
	if err != nil {
		return false, err
	}
	posp, p0 := b.posArgs(a.Pos)
	// The bytes: the weights and scales, x, the outputs, and k and v once more into the cache.
	bytes := int64(rows)*int64(D+2) + a.SQ.NumBytes() + a.SK.NumBytes() + a.SV.NumBytes() + a.X.NumBytes() + int64(2*KV*d)*2
	args := []uint64{cuda.Ptr(a.Q.Ptr()), cuda.Ptr(a.K.Ptr()), cuda.Ptr(a.V.Ptr()), cuda.Ptr(a.KCache.Ptr()), cuda.Ptr(a.VCache.Ptr()),
		cuda.Ptr(a.X.Ptr()), cuda.Ptr(a.WQ.Ptr()), cuda.Ptr(a.WK.Ptr()), cuda.Ptr(a.WV.Ptr()),
		cuda.Ptr(a.SQ.Ptr()), cuda.Ptr(a.SK.Ptr()), cuda.Ptr(a.SV.Ptr()), cuda.I32(int(a.SQ.DType())),
		cuda.I32(H), cuda.I32(KV), cuda.I32(d), cuda.I32(D), cuda.I32(shift), cuda.I32(fp8Stride(D, a.Layout)),
		cuda.I32(a.KCache.Dim(0)), posp, p0, cuda.Ptr(tab)}
	if a.Norm != nil {
		args = append(args, cuda.Ptr(a.Norm.Ptr()), cuda.F32(a.Eps))
	}
	return true, f.LaunchBytes(b.s, bytes, cuda.Dim3{X: grid}, cuda.Dim3{X: 256}, smem, args...)
}
