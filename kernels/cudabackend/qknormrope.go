//go:build cuda

package cudabackend

import (
	"fmt"
	"os"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// A Qwen3-style layer's per-head q/k RMSNorm, RoPE and KV-cache store as
// one launch of qknorm_rope_store_bf16 (kernels.NormRoPEStorer;
// kernels/cuda/qknorm_rope.cu) instead of rmsnorm_pair_bf16_v8 and
// rope_store_bf16, with their bits: the norm's sums at the block size
// PairRMSNorm launches, the rotation by rope_rotate. One block a head of a
// token; a k head's block also stores the head's k and v. FT_QKNORM_ROPE
// picks it: unset or "1" for one-token steps (the decode step, where the
// two launches it replaces are latency-bound), "all" for every forward
// (prefills too), "0" never. Measured on the H200 at the Qwen3-8B shape
// (s13b): graph step 4.47 ms on and off, run-model 4.40–4.43 ms a token
// against 4.42, 291 launches against 327 in the eager kernel table, the
// same generated ids; kept on (fewer launches, same bits, same time).

// qkNormRoPEFromEnv reads FT_QKNORM_ROPE (its values are checked with the
// other switches, envswitch.go): the most tokens a call fuses, 0 none, −1
// any number.
func qkNormRoPEFromEnv() int {
	switch os.Getenv("FT_QKNORM_ROPE") {
	case "0":
		return 0
	case "all":
		return -1
	default:
		return 1
	}
}

// normThreads is the block size of the BF16 row norms over rows of dim
// values (dim % 8 == 0): a multiple of 32 threads, one 16-byte chunk each,
// at most 1024. RMSNorm, PairRMSNorm and NormRoPEStoreKV use it, so their
// sums agree.
func normThreads(dim int) int { return min(1024, max(32, (dim/8+31)/32*32)) }

// NormRoPEStoreKV normalises each q and k head, rotates them and stores k
// and v at rows a.Pos.. of the caches in one launch of
// qknorm_rope_store_bf16 (kernels.NormRoPEStorer). It declines (false,
// nothing enqueued) when QKNormRoPETokens does not cover a's tokens, or the
// operands are not what the kernel takes: BF16 tensors on this device,
// heads of a multiple of 8 values up to 8,192, 16-byte aligned; wrong shapes are an
// error.
func (b *Backend) NormRoPEStoreKV(a kernels.QKNormRoPE) (bool, error) {
	T, H, KV, d, err := a.Check()
	if err != nil {
		return false, fmt.Errorf("cudabackend: %w", err)
	}
	if b.QKNormRoPETokens == 0 || (b.QKNormRoPETokens > 0 && T > b.QKNormRoPETokens) {
		return false, nil
	}
	ts := []*runtime.Tensor{a.Q, a.K, a.V, a.QNorm, a.KNorm, a.KCache, a.VCache}
	for _, t := range ts {
		if !b.here(t) || t.DType() != runtime.BF16 || !aligned16(t.Ptr()) {
			return false, nil
		}
	}
	if d%8 != 0 || d/8 > 1024 { // a 16-byte chunk a thread (qknorm_rope.cu)
		return false, nil
	}
	if T == 0 {
		return true, nil
	}
	tab, err := b.ropeTable(a.InvFreq)
	if err != nil {
		return false, err
	}
	posp, p0 := b.posArgs(a.Pos)
	// The bytes: q and k read and written, v read, k and v into the cache, the weights.
	bytes := int64(T)*int64(d)*2*(2*int64(H+KV)+3*int64(KV)) + 4*int64(d)
	return true, b.k.qkNormRoPE.LaunchBytes(b.s, bytes, cuda.Dim3{X: T * (H + KV)}, cuda.Dim3{X: normThreads(d)}, 2*d,
		cuda.Ptr(a.Q.Ptr()), cuda.Ptr(a.K.Ptr()), cuda.Ptr(a.V.Ptr()), cuda.Ptr(a.KCache.Ptr()), cuda.Ptr(a.VCache.Ptr()),
		cuda.Ptr(a.QNorm.Ptr()), cuda.Ptr(a.KNorm.Ptr()), cuda.I32(H), cuda.I32(KV), cuda.I32(d), cuda.F32(a.Eps),
		cuda.I32(a.KCache.Dim(0)), posp, p0, cuda.Ptr(tab))
}

var _ kernels.NormRoPEStorer = (*Backend)(nil)
