//go:build cuda

package cudabackend

import (
	"fmt"
	"os"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// A one-token step's q/k/v GEMV with the biases, RoPE and the KV-cache
// store in its epilogue (kernels.QKVRoPEStorer; kernels/cuda/rope_qkv.cu):
// one launch instead of gemv3_bf16, add_bias_bf16 per bias and
// rope_store_bf16, with their bits (each projection rounded to bf16, the
// bias added and rounded, the pair rotated in fp32 and rounded by the
// function rope_pair uses). Every rotary scaling the decoder supports lives
// in the frequency table, which the kernel reads as rope_store_bf16 does.
// Backend.NoFusedRoPE turns it off, and it is off unless FT_FUSE_ROPE=1:
// on the H200 (2026-12-01, bench/h200-s5c.sh, Llama-3-8B shape, context
// 512) the graph-replayed step took 4.33 ms with it against 4.29 ms with
// gemv3_bf16 and rope_store_bf16 apart (the pair-of-rows tasks stream two
// rows per warp where gemv3_bf16's warps stream one, a longer tail).

// noFusedRoPEFromEnv is the default of Backend.NoFusedRoPE: FT_FUSE_ROPE
// "1" fuses, "" or "0" does not; anything else is an error.
func noFusedRoPEFromEnv() (bool, error) {
	switch v := os.Getenv("FT_FUSE_ROPE"); v {
	case "1":
		return false, nil
	case "", "0":
		return true, nil
	default:
		return false, fmt.Errorf("FT_FUSE_ROPE=%q: want 0 or 1 (or unset)", v)
	}
}

// loadQKVRoPE looks the fused kernel up and sizes its persistent grid:
// blocks of 256 threads resident at once on the whole GPU.
func (ks *kernelSet) loadQKVRoPE(get func(string) *cuda.Function) {
	ks.qkvRoPE = get("gemv3_rope_store_bf16")
}

// sizeQKVRoPE records the fused kernel's resident blocks on sms
// multiprocessors in persistBlocks.
func (ks *kernelSet) sizeQKVRoPE(sms int) error {
	n, err := ks.qkvRoPE.MaxActiveBlocksPerSM(256, 0)
	if err != nil {
		return err
	}
	ks.persistBlocks[ks.qkvRoPE] = max(1, n) * sms
	return nil
}

// ProjectRoPEStoreKV runs a one-token step's q/k/v projections, biases,
// RoPE and KV store as one gemv3_rope_store_bf16 launch
// (kernels.QKVRoPEStorer). It declines (false, nothing enqueued) when
// NoFusedRoPE is set or the operands are not what the kernel takes: BF16
// tensors on this device, weights and x 16-byte aligned with rows of a
// multiple of 8 values, BF16 biases; wrong shapes are an error.
func (b *Backend) ProjectRoPEStoreKV(a kernels.QKVRoPE) (bool, error) {
	if b.NoFusedRoPE {
		return false, nil
	}
	H, KV, d, err := a.Check()
	if err != nil {
		return false, fmt.Errorf("cudabackend: %w", err)
	}
	for _, t := range []*runtime.Tensor{a.Q, a.K, a.V, a.X, a.WQ, a.WK, a.WV, a.BQ, a.BK, a.BV, a.KCache, a.VCache} {
		if t != nil && (!b.here(t) || t.DType() != runtime.BF16) {
			return false, nil
		}
	}
	D := a.X.Dim(-1)
	if D%8 != 0 || !aligned16(a.X.Ptr(), a.WQ.Ptr(), a.WK.Ptr(), a.WV.Ptr()) {
		return false, nil
	}
	tab, err := b.ropeTable(a.InvFreq)
	if err != nil {
		return false, err
	}
	bias := func(t *runtime.Tensor) uint64 {
		if t == nil {
			return cuda.Ptr(0)
		}
		return cuda.Ptr(t.Ptr())
	}
	rows := (H + 2*KV) * d
	tasks := rows / 2
	f := b.k.qkvRoPE
	posp, p0 := b.posArgs(a.Pos)
	// The bytes: the weights, x, the outputs, and k and v once more into the cache.
	bytes := gemvBytes(rows, D, a.Q) + int64(2*KV*d)*2
	return true, f.LaunchBytes(b.s, bytes, cuda.Dim3{X: min(b.k.persistBlocks[f], (tasks+7)/8)}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(a.Q.Ptr()), cuda.Ptr(a.K.Ptr()), cuda.Ptr(a.V.Ptr()), cuda.Ptr(a.KCache.Ptr()), cuda.Ptr(a.VCache.Ptr()),
		cuda.Ptr(a.X.Ptr()), cuda.Ptr(a.WQ.Ptr()), cuda.Ptr(a.WK.Ptr()), cuda.Ptr(a.WV.Ptr()), bias(a.BQ), bias(a.BK), bias(a.BV),
		cuda.I32(H), cuda.I32(KV), cuda.I32(d), cuda.I32(D), cuda.I32(a.KCache.Dim(0)), posp, p0, cuda.Ptr(tab))
}

var _ kernels.QKVRoPEStorer = (*Backend)(nil)
