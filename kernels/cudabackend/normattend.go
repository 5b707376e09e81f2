//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"os"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// A Qwen3-style layer's one-token q/k RMSNorm, RoPE, KV store and decode
// attention as one launch of attn_decode_pipe_d128_s3w4h1tpn_bf16
// (kernels.NormRoPEAttender; decode_tr.cu's NORM), where
// qknorm_rope_store_bf16 and the default decode attention (s3w4h1tp) are
// two: the q/k/v GEMV then comes directly before the attention, one
// launch and one dependent-launch wait fewer a layer. The attention
// normalises and rotates its query as it loads it; the warp that reads
// the new cache row writes it first. Backend.NoQKNormAttention
// (FT_QKNORM_ATTN=0) turns it off for A/B runs.

// noQKNormAttentionFromEnv is the default of Backend.NoQKNormAttention.
func noQKNormAttentionFromEnv() bool { return os.Getenv("FT_QKNORM_ATTN") == "0" }

// normAttnKernel is the kernel's name.
const normAttnKernel = "attn_decode_pipe_d128_s3w4h1tpn_bf16"

// sizeNormAttn lets the fused kernel take the dynamic shared memory of
// the variant it extends (the same ring and merge scratch); where that
// variant was dropped (sizeWave) the fused kernel is too.
func (ks *kernelSet) sizeNormAttn() {
	pk := ks.decodeMMA.pipe[normAttnVariant]
	if ks.normAttn == nil || pk == nil || ks.normAttn.SetMaxDynamicSharedMemory(pk.maxSmem) != nil {
		ks.normAttn = nil
	}
}

// normAttnVariant is the decode attention variant the fused kernel is
// (contigPipeDefault, s3w4h1tp): its splits, grid and shared memory.
var normAttnVariant = pipeVariant{D: 128, S: 3, W: 4, H: 1, Tr: true, Pre: true}

// NormRoPEAttend normalises and rotates q and k, stores k and v at row
// a.Pos of the caches and writes to out the decode attention of the query
// over rows 0..a.Pos (the last window of them when window > 0), in one
// launch (kernels.NormRoPEAttender). a.Q and a.K are not written. It
// declines (false, nothing enqueued) where the decode attention would not
// take the default transposed kernel (more than one token, head width
// other than 128, 8 or more query heads per KV head, another decode
// variant or path switched on) or the fusion is off, and for operands that
// are not BF16 tensors on this device, 16-byte aligned; wrong shapes are
// errors.
func (b *Backend) NormRoPEAttend(out *runtime.Tensor, a kernels.QKNormRoPE, window int) (bool, error) {
	T, H, KV, d, err := a.Check()
	if err != nil {
		return false, fmt.Errorf("cudabackend: %w", err)
	}
	if window < 0 {
		return false, fmt.Errorf("cudabackend.NormRoPEAttend: sliding window %d is negative (0 means none)", window)
	}
	if out == nil || !out.Shape().Equal(a.Q.Shape()) {
		var got runtime.Shape
		if out != nil {
			got = out.Shape()
		}
		return false, fmt.Errorf("cudabackend.NormRoPEAttend: out %v, want q's shape %v", got, a.Q.Shape())
	}
	G := H / KV
	if b.NoQKNormAttention || b.k.normAttn == nil || T != 1 || d != 128 || H%KV != 0 || G >= 8 ||
		b.LegacyDecodeAttention || b.NoDecodePipe || b.noFlash || (b.DecodePipeVariant != "" && b.DecodePipeVariant != contigPipeDefault) {
		return false, nil
	}
	for _, t := range []*runtime.Tensor{out, a.Q, a.K, a.V, a.QNorm, a.KNorm, a.KCache, a.VCache} {
		if !b.here(t) || t.DType() != runtime.BF16 || !aligned16(t.Ptr()) {
			return false, nil
		}
	}
	pk := b.k.decodeMMA.pipe[normAttnVariant]
	if pk == nil {
		return false, nil
	}
	C := a.KCache.Dim(0)
	nsplit := b.pipeSplits(normAttnVariant, pk, C, KV, G)
	po, pml, cnt, err := b.mmaPartials(1, nsplit, H, KV, d)
	if err != nil {
		return false, err
	}
	tab, err := b.ropeTable(a.InvFreq)
	if err != nil {
		return false, err
	}
	posp, p0 := b.posArgs(a.Pos)
	scale := float32(math.Log2E / math.Sqrt(float64(d)))
	// The bytes: the cache rows read, q, k and v read, the new rows written.
	kvBytes := 2*int64(a.Pos+1)*int64(KV)*int64(d)*2 + int64(d)*2*(int64(H)+4*int64(KV))
	return true, b.k.normAttn.LaunchBytes(b.s, kvBytes, cuda.Dim3{X: KV, Y: nsplit, Z: 1}, cuda.Dim3{X: 32 * normAttnVariant.W},
		normAttnVariant.smem(nsplit, G),
		cuda.Ptr(out.Ptr()), cuda.Ptr(po), cuda.Ptr(pml), cuda.Ptr(cnt), cuda.Ptr(a.Q.Ptr()), cuda.Ptr(a.KCache.Ptr()), cuda.Ptr(a.VCache.Ptr()),
		cuda.I32(H), cuda.I32(KV), cuda.I32(nsplit), cuda.I32(b.pipeChunk()), posp, p0, cuda.F32(scale), cuda.I32(window),
		cuda.Ptr(a.K.Ptr()), cuda.Ptr(a.V.Ptr()), cuda.Ptr(a.QNorm.Ptr()), cuda.Ptr(a.KNorm.Ptr()), cuda.F32(a.Eps), cuda.Ptr(tab))
}

var _ kernels.NormRoPEAttender = (*Backend)(nil)
