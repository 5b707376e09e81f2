//go:build cuda

package cudabackend

import (
	"os"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// A Qwen3-style one-token step's q/k/v GEMV with the per-head q/k norms,
// RoPE and the KV store done by the warp that finishes each head
// (kernels.QKVRoPEStorer with QKVRoPE.QNorm set; kernels/cuda/qkvnorm.cu):
// one launch instead of the pipelined q/k/v GEMV and qknorm_rope_store_bf16,
// with their bits. The separate kernel costs Qwen3-8B about 0.08 ms a token
// (s15a: 2.2 µs a layer, HBM idle), and Qwen3's run-model token is 0.05 ms
// above its 1.10 × floor target (s16c): this takes the kernel and its
// launch off the critical path, at one atomic a row in the GEMV.
// Backend.FuseQKNorm turns it on (FT_FUSE_QKNORM=1); off by default until
// measured.

// fuseQKNormFromEnv is the default of Backend.FuseQKNorm: FT_FUSE_QKNORM=1.
func fuseQKNormFromEnv() bool { return os.Getenv("FT_FUSE_QKNORM") == "1" }

// loadQKVNorm looks the fused kernel up.
func (ks *kernelSet) loadQKVNorm(get func(string) *cuda.Function) {
	ks.qkvNorm = get("gemv3_qknorm_rope_early_bf16")
}

// projectNormRoPE runs a's projections, q/k norms, RoPE and KV store as one
// gemv3_qknorm_rope_early_bf16 launch (ProjectRoPEStoreKV calls it with
// FuseQKNorm set). It declines (false, nothing enqueued) unless the
// operands are what the kernel takes: no biases, BF16 tensors on this device, heads of a multiple of 16
// values up to 256 (a chunk a lane of one warp), 16-byte aligned rows of a
// multiple of 8 values. a has passed Check; H, KV and d are its heads.
func (b *Backend) projectNormRoPE(a kernels.QKVRoPE, H, KV, d int) (bool, error) {
	if a.BQ != nil || a.BK != nil || a.BV != nil || d%16 != 0 || d > 256 {
		return false, nil
	}
	for _, t := range []*runtime.Tensor{a.Q, a.K, a.V, a.X, a.WQ, a.WK, a.WV, a.KCache, a.VCache, a.QNorm, a.KNorm} {
		if !b.here(t) || t.DType() != runtime.BF16 || !aligned16(t.Ptr()) {
			return false, nil
		}
	}
	D := a.X.Dim(-1)
	if D%8 != 0 {
		return false, nil
	}
	tab, err := b.ropeTable(a.InvFreq)
	if err != nil {
		return false, err
	}
	cnt, err := b.zeroedInts(&b.headCounters, H+2*KV, "q/k/v head counters")
	if err != nil {
		return false, err
	}
	N0, N1 := H*d, KV*d
	f := b.k.qkvNorm
	posp, p0 := b.posArgs(a.Pos)
	// The bytes: the weights, x, the outputs, q and k read back and
	// rewritten, k and v into the cache.
	bytes := gemvBytes(N0+2*N1, D, a.Q) + int64(2*(N0+N1)+2*N1)*2
	return true, f.LaunchBytes(b.s, bytes, cuda.Dim3{X: b.gemvGrid(f, N0+2*N1)}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(a.Q.Ptr()), cuda.Ptr(a.K.Ptr()), cuda.Ptr(a.V.Ptr()), cuda.Ptr(a.X.Ptr()),
		cuda.Ptr(a.WQ.Ptr()), cuda.Ptr(a.WK.Ptr()), cuda.Ptr(a.WV.Ptr()), cuda.I32(N0), cuda.I32(N1), cuda.I32(N1), cuda.I32(D),
		cuda.Ptr(a.KCache.Ptr()), cuda.Ptr(a.VCache.Ptr()), cuda.Ptr(a.QNorm.Ptr()), cuda.Ptr(a.KNorm.Ptr()),
		cuda.I32(d), cuda.F32(a.Eps), cuda.I32(a.KCache.Dim(0)), posp, p0, cuda.Ptr(tab), cuda.Ptr(cnt))
}
