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

// A one-token decode step's RoPE and KV store inside the decode attention
// kernel (kernels.RoPEAttender; kernels/cuda/decode_tr.cu's
// attn_decode_rope_*): every block of the transposed kernel rotates the
// query heads it reads after its dependent-launch wait, and the block whose
// split holds the new position rotates the new key and stores it and the
// value in the cache row before its copies read the row back. One launch
// instead of rope_store_bf16 and the attention, the same bits (rope_rotate
// with the same frequency table, the same splits and merge).
// Backend.RoPEAttn turns it on (FT_ROPE_ATTN=1); off, AttendRoPE declines
// and the decoder runs RoPEStoreKV and Attention. It applies where
// Attention would take the transposed kernel of a variant in ropeVariants
// (head width 128, a contiguous cache, one token); elsewhere it declines.

// ropeAttnFromEnv is the default of Backend.RoPEAttn: FT_ROPE_ATTN=1 (New
// rejects values other than "", 0 and 1: envswitch.go).
func ropeAttnFromEnv() bool { return os.Getenv("FT_ROPE_ATTN") == "1" }

// ropeVariants are the variants compiled with RoPE folded in (decode_tr.cu's
// FT_TR_ROPE_VARIANT lines): the default contiguous one and its FAST twin.
var ropeVariants = []string{"s3w4h1t", "s3w4h1tf"}

// ropeVariant reports whether v has a kernel with RoPE folded in.
func ropeVariant(v pipeVariant) bool {
	if !v.Tr || v.D != 128 || v.H != 1 {
		return false
	}
	for _, n := range ropeVariants {
		if v.Name() == n {
			return true
		}
	}
	return false
}

// ropeKernel is the name of v's kernel with RoPE folded in.
func (v pipeVariant) ropeKernel() string {
	return fmt.Sprintf("attn_decode_rope_d%d_%s_bf16", v.D, v.Name())
}

// RoPEAttends reports whether AttendRoPE is switched on (Backend.RoPEAttn).
func (b *Backend) RoPEAttends() bool { return b.RoPEAttn }

// RoPEAttentions is the number of fused launches AttendRoPE has enqueued
// (or recorded into a captured graph) on b: tests check that the fused
// kernel, not the fall-back, ran.
func (b *Backend) RoPEAttentions() int64 { return b.ropeAttns }

// AttendRoPE rotates a.Q and the new key a.K at a.Pos, stores the key and
// a.V in cache row a.Pos and writes the attention to a.Out, in one launch
// of the transposed decode kernel (kernels.RoPEAttender); a.Q and a.K keep
// their values. It declines (false, nothing enqueued) when switched off
// (Backend.RoPEAttn) and where Attention would not take a transposed
// variant with a RoPE kernel: head width other than 128, the legacy or
// single-buffered decode switches, more than 8 query heads per KV head
// (unless ForceMMADecode), unaligned tensors, another FT_DECODE_VARIANT.
func (b *Backend) AttendRoPE(a kernels.RoPEAttention) (bool, error) {
	if !b.RoPEAttn {
		return false, nil
	}
	H, K, d, C, err := a.Check()
	if err != nil {
		return false, err
	}
	for _, c := range []struct {
		n string
		t *runtime.Tensor
	}{{"out", a.Out}, {"q", a.Q}, {"k", a.K}, {"v", a.V}, {"k cache", a.KCache}, {"v cache", a.VCache}} {
		if err := b.act("AttendRoPE", c.n, c.t); err != nil {
			return false, err
		}
	}
	G := H / K
	if d != 128 || b.NoDecodePipe || b.decodeMMA(false, d, G, a.Q.Ptr(), a.KCache.Ptr(), a.VCache.Ptr(), a.Out.Ptr()) == nil {
		return false, nil
	}
	v, pk, err := b.pipeFor(d, K, true)
	if err != nil {
		return false, err
	}
	if pk == nil || pk.rope == nil || v.H != 1 {
		return false, nil
	}
	tab, err := b.ropeTable(a.InvFreq)
	if err != nil {
		return false, err
	}
	nsplit := b.pipeSplits(v, pk, C, K, G)
	po, pml, cnt, err := b.mmaPartials(1, nsplit, H, K, d)
	if err != nil {
		return false, err
	}
	scale := float32(math.Log2E / math.Sqrt(float64(d)))
	posp, p0 := b.posArgs(a.Pos)
	kvBytes := 2 * int64(a.Pos+1) * int64(K) * int64(d) * int64(a.KCache.DType().Size())
	if err := pk.rope.LaunchBytes(b.s, kvBytes, cuda.Dim3{X: K, Y: nsplit, Z: 1}, cuda.Dim3{X: 32 * v.W}, v.smem(nsplit, G),
		cuda.Ptr(a.Out.Ptr()), cuda.Ptr(po), cuda.Ptr(pml), cuda.Ptr(cnt), cuda.Ptr(a.Q.Ptr()),
		cuda.Ptr(a.KCache.Ptr()), cuda.Ptr(a.VCache.Ptr()), cuda.Ptr(a.K.Ptr()), cuda.Ptr(a.V.Ptr()),
		cuda.I32(H), cuda.I32(K), cuda.I32(nsplit), cuda.I32(b.pipeChunk()), posp, p0, cuda.F32(scale), cuda.I32(a.Window),
		cuda.Ptr(tab), cuda.I32(C)); err != nil {
		return true, err
	}
	b.ropeAttns++
	return true, nil
}

var _ kernels.RoPEAttender = (*Backend)(nil)
