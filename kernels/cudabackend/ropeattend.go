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

// A one-token decode step's RoPE, KV-cache store and attention in one
// launch (kernels.RoPEAttender): the RoPE twin of the contiguous decode
// attention variant (decode_tr.cu's FT_TR_ROPE_VARIANT) rotates the query
// heads as it loads them and, in the block whose split ends at the new
// position, the new key before it stores it and the value into the
// caches' row, so no rope_store_bf16 launch sits between the q/k/v
// projection and the attention. Why it was tried: in the resident FP8
// step's block trace (s28d) that launch took 2.3 µs of each layer's
// critical path. Measured slower (s29b, H200, bench/h200-s29b.sh): FP8 step
// at 512 2.59, 2.58 ms against 2.52, 2.51 without; at 2,000 2.68 against
// 2.62; BF16 at 512 4.15 against 4.10. The attention's blocks become
// resident only as the persistent q/k/v projection's blocks leave the SMs;
// with rope_store_bf16 between them they copy the older keys and values
// during its 2.3 µs (decode_tr.cu's PRE), without it those copies start
// when the data is already needed. So it is off unless FT_ROPE_ATTEND=1.

// ropeTwins are the variants compiled with a RoPE twin: the contiguous
// defaults (contigPipeShort, contigPipeDefault).
var ropeTwins = []string{contigPipeShort, contigPipeDefault}

// ropeKernel is the name of the variant's RoPE twin.
func (v pipeVariant) ropeKernel() string {
	return fmt.Sprintf("attn_decode_rope_d%d_%s_bf16", v.D, v.Name())
}

// noRoPEAttendFromEnv is the default of Backend.NoRoPEAttend: set unless
// FT_ROPE_ATTEND=1.
func noRoPEAttendFromEnv() bool { return os.Getenv("FT_ROPE_ATTEND") != "1" }

// RoPEAttend is kernels.RoPEAttendRef as one launch of the decode
// attention variant's RoPE twin. It declines (false, nil: nothing ran)
// with Backend.NoRoPEAttend, the staged or single-buffered decode
// attention (LegacyDecodeAttention, NoDecodePipe), and where the variant
// the attention would take has no twin (head width other than 128, more
// than 8 query heads per KV head, a variant picked by FT_DECODE_VARIANT
// without one, a GPU whose shared memory drops it) or the tensors are not
// 16-byte aligned. Bad operands are errors (switched off, it declines
// before looking at them).
func (b *Backend) RoPEAttend(a kernels.RoPEAttention) (bool, error) {
	if b.NoRoPEAttend {
		return false, nil
	}
	H, K, d, err := a.Check()
	if err != nil {
		return false, err
	}
	for _, c := range []struct {
		n string
		t *runtime.Tensor
	}{{"out", a.Out}, {"q", a.Q}, {"k", a.K}, {"v", a.V}, {"k cache", a.KCache}, {"v cache", a.VCache}} {
		if err := b.act("RoPEAttend", c.n, c.t); err != nil {
			return false, err
		}
	}
	if b.NoDecodePipe || d != 128 {
		return false, nil
	}
	G, C := H/K, a.KCache.Dim(0)
	if b.decodeMMA(false, d, G, a.Out.Ptr(), a.Q.Ptr(), a.K.Ptr(), a.V.Ptr(), a.KCache.Ptr(), a.VCache.Ptr()) == nil {
		return false, nil
	}
	v, pk, err := b.pipeFor(d, K, true, C)
	if err != nil {
		return false, err
	}
	if pk == nil || pk.rope == nil || v.H != 1 {
		return false, nil
	}
	nsplit := b.pipeSplits(v, pk, C, K, G)
	smem := v.smem(nsplit, G)
	if smem > pk.ropeSmem {
		return false, nil
	}
	tab, err := b.ropeTable(a.InvFreq)
	if err != nil {
		return false, err
	}
	po, pml, cnt, err := b.mmaPartials(1, nsplit, H, K, d)
	if err != nil {
		return false, err
	}
	scale := float32(math.Log2E / math.Sqrt(float64(d)))
	posp, p0 := b.posArgs(a.Pos)
	kvBytes := 2 * int64(a.Pos+1) * int64(K) * int64(d) * int64(a.KCache.DType().Size())
	return true, pk.rope.LaunchBytes(b.s, kvBytes, cuda.Dim3{X: K, Y: nsplit, Z: 1}, cuda.Dim3{X: 32 * v.W}, smem,
		cuda.Ptr(a.Out.Ptr()), cuda.Ptr(po), cuda.Ptr(pml), cuda.Ptr(cnt), cuda.Ptr(a.Q.Ptr()),
		cuda.Ptr(a.K.Ptr()), cuda.Ptr(a.V.Ptr()), cuda.Ptr(a.KCache.Ptr()), cuda.Ptr(a.VCache.Ptr()),
		cuda.I32(H), cuda.I32(K), cuda.I32(nsplit), cuda.I32(b.pipeChunk()), posp, p0, cuda.F32(scale), cuda.I32(a.Window),
		cuda.Ptr(tab))
}

var _ kernels.RoPEAttender = (*Backend)(nil)
