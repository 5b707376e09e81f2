//go:build cuda

package cudabackend

import (
	"fmt"
	"slices"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// The attention input of a many-row forward as one GEMM (gemm_qkv_rope_tma_bf16,
// gemmfused.go): q, k, v = x·[wq; wk; wv]ᵀ, q and k rotated and k, v stored
// into the cache by the epilogue, in place of three GEMMs (k and v too
// narrow to fill the device alone) and the RoPE + store kernel that reads
// q, k and v back; the epilogue stores through shared memory and by TMA.
// FT_QKV_GEMM=1 (Backend.QKVGEMM).

var _ kernels.QKVRoPERowsStorer = (*Backend)(nil)

// ropeCS is the table of cos and sin of p·θ_i (float2 [n, d/2], θ the
// rotary frequencies csFor) for positions p < n that the fused epilogue
// reads.
type ropeCS struct {
	buf   *runtime.DeviceBuffer
	csFor []float32
	n     int
}

// ropeCSTable returns the device table of cos and sin for invFreq covering
// positions below need, computing it (on the compute stream, before the
// launches that read it) where the held one is for other frequencies or
// too short. A replaced table is retired (b.retired), not freed.
func (b *Backend) ropeCSTable(m *gemmFusedModule, invFreq []float32, need int) (uintptr, error) {
	t := &b.ropeCS
	if t.buf != nil && t.n >= need && slices.Equal(t.csFor, invFreq) {
		return t.buf.Ptr(), nil
	}
	inv, err := b.ropeTable(invFreq)
	if err != nil {
		return 0, err
	}
	n := max(need, 4096)
	if t.buf != nil && slices.Equal(t.csFor, invFreq) {
		n = max(n, 2*t.n)
	}
	half := len(invFreq)
	buf, err := b.dev.Alloc(int64(n)*int64(half)*8, "rope cos/sin table")
	if err != nil {
		return 0, err
	}
	total := int64(n) * int64(half)
	if err := m.table.Launch(b.s, cuda.Dim3{X: b.gridFor(total)}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(buf.Ptr()), cuda.Ptr(inv), cuda.I32(half), cuda.I32(n)); err != nil {
		buf.Free()
		return 0, err
	}
	if t.buf != nil {
		b.retired = append(b.retired, t.buf)
	}
	*t = ropeCS{buf: buf, csFor: slices.Clone(invFreq), n: n}
	return buf.Ptr(), nil
}

// ProjectRoPEStoreRows is kernels.QKVRoPERowsStorer by
// gemm_qkv_rope_tma_bf16.
// ran false, nothing written: switched off, a stream being captured, an
// operand not BF16 on this device, fewer than fusedMinTokens rows, a head
// width other than 128, an odd head count, D not a multiple of 64,
// unaligned rows, or no kernel on this device.
func (b *Backend) ProjectRoPEStoreRows(a kernels.QKVRoPERows) (bool, error) {
	const op = "ProjectRoPEStoreRows"
	if !b.QKVGEMM || b.capturing {
		return false, nil
	}
	T, H, KV, d, err := a.Check()
	if err != nil {
		return false, fmt.Errorf("cudabackend: %w", err)
	}
	for _, t := range []*runtime.Tensor{a.Q, a.K, a.V, a.X, a.WQ, a.WK, a.WV, a.KCache, a.VCache} {
		if !b.here(t) || t.DType() != runtime.BF16 {
			return false, nil
		}
	}
	D := a.X.Dim(-1)
	if T < fusedMinTokens || d != 128 || H%2 != 0 || KV%2 != 0 || D%64 != 0 ||
		!aligned16(a.X.Ptr(), a.WQ.Ptr(), a.WK.Ptr(), a.WV.Ptr(), a.Q.Ptr(), a.K.Ptr(), a.V.Ptr(), a.KCache.Ptr(), a.VCache.Ptr()) {
		return false, nil
	}
	m := b.gemmFused()
	if m == nil {
		return false, nil
	}
	need := a.Pos + T
	var ps uintptr
	if a.Positions != nil {
		need = int(slices.Max(a.Positions)) + 1
		if ps, err = b.uploadRoPEPairs(a.Positions, a.Slots); err != nil {
			return false, err
		}
	}
	cs, err := b.ropeCSTable(m, a.InvFreq, need)
	if err != nil {
		return false, err
	}
	maps, err := b.tensorMaps(op, D, matrix{a.X.Ptr(), T}, matrix{a.WQ.Ptr(), H * d}, matrix{a.WK.Ptr(), KV * d}, matrix{a.WV.Ptr(), KV * d})
	if err != nil {
		return false, err
	}
	N := (H + 2*KV) * d
	for _, o := range []struct {
		p    uintptr
		cols int
	}{{a.Q.Ptr(), H * d}, {a.K.Ptr(), KV * d}, {a.V.Ptr(), KV * d}} {
		om, err := b.outputMaps(op, matrix{o.p, T}, o.cols)
		if err != nil {
			return false, err
		}
		maps = append(maps, om...)
	}
	args := append([]uint64{cuda.Ptr(a.KCache.Ptr()), cuda.Ptr(a.VCache.Ptr()),
		cuda.Ptr(ps), cuda.I32(a.Pos), cuda.I32(a.KCache.Dim(0)), cuda.Ptr(cs), cuda.I32(H), cuda.I32(KV), cuda.I32(T), cuda.I32(D)}, maps...)
	bytes := int64(T)*int64(D)*2 + int64(N)*int64(D)*2 + int64(T)*int64(N+2*KV*d)*2
	return true, b.launchFused(m.qkv, (T+127)/128*(H+2*KV)/2, gemmFusedSmemTMA, bytes, args...)
}
