//go:build cuda

package cudabackend

import (
	"errors"
	"fmt"
	"os"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// Merged GEMMs (kernels.MergedMatMuler, kernels.MergedGateUpSiLUer): when
// the weights of several projections of one input lie back to back in
// device memory (kernels.Adjacent: the offload engine packs a unit's
// parameters in order, so a layer's q, k, v and its gate, up are adjacent
// where there is no bias between them), they are one matrix [ΣN,D], and a
// several-token forward runs one GEMM x·[ΣN,D]ᵀ into the scratch
// b.merged [T,ΣN] and one launch that copies its columns out (or applies
// silu·mul to its gate and up halves). For a batched decode (T = 64 on
// Llama-3-8B) the k and v GEMMs alone are latency-bound (11 µs each for
// 8 MiB); merged with q the one GEMM streams the 48 MiB at full bandwidth.

var (
	_ kernels.MergedMatMuler     = (*Backend)(nil)
	_ kernels.MergedGateUpSiLUer = (*Backend)(nil)
)

// noMergedFromEnv is the default of Backend.NoMergedGEMM.
func noMergedFromEnv() bool { return os.Getenv("FT_MERGED_GEMM") == "0" }

// mergedKernels are merged.cu's column splits.
type mergedKernels struct {
	split, splitV8, silu, siluV8 *cuda.Function
}

func loadMerged(get func(string) *cuda.Function) mergedKernels {
	return mergedKernels{split: get("split_cols_bf16"), splitV8: get("split_cols_bf16_v8"),
		silu: get("silu_mul_split_bf16"), siluV8: get("silu_mul_split_bf16_v8")}
}

// mergedScratch returns the merged GEMMs' scratch of at least n bytes, or
// 0 when it would have to grow while a graph is being captured (no
// allocation then: the caller runs the separate GEMMs). A grown scratch's
// old buffer is retired (a captured graph may read it); every buffer is
// kept on b.retired, which Close frees. It grows to at least twice its
// size, so the retired buffers add up to less than the newest.
func (b *Backend) mergedScratch(n int64) (uintptr, error) {
	if b.merged != nil && b.merged.Size() >= n {
		return b.merged.Ptr(), nil
	}
	if b.capturing {
		return 0, nil
	}
	if b.merged != nil {
		n = max(n, 2*b.merged.Size())
	}
	buf, err := b.dev.Alloc(n, "merged GEMM scratch")
	if err != nil {
		return 0, err
	}
	b.retired = append(b.retired, buf)
	b.merged = buf
	return buf.Ptr(), nil
}

// MergesAllTokens is kernels.MergedAllTokenser: FT_MERGED_GEMM=all asks
// for both merges at every token count, =gateup for gate/up's alone, =qkv
// for q/k/v's alone (MergedAll).
func (b *Backend) MergesAllTokens(gateUp bool) bool {
	return !b.NoMergedGEMM && b.MergedAll.mergesAll(gateUp)
}

var _ kernels.MergedAllTokenser = (*Backend)(nil)

// mergedScratchFor is mergedScratch for a call of T tokens: beyond the
// decoder's default range (MergedAll) the scratch (470 MB for 8,192
// tokens of Llama-3-8B's gate/up) is taken only where it fits in half the
// memory left (mergedRoom: the device's limit, the card's free memory),
// and running out of memory is no error: 0, the caller runs the separate
// GEMMs.
func (b *Backend) mergedScratchFor(T int, n int64) (uintptr, error) {
	if T <= mergedSmallTokens || b.merged != nil && b.merged.Size() >= n {
		return b.mergedScratch(n)
	}
	need := n
	if b.merged != nil {
		need = max(n, 2*b.merged.Size())
	}
	free, _, err := b.dev.FreeMemory()
	if err != nil {
		return 0, err
	}
	room := free
	if st := b.dev.Memory(); st.Limit > 0 {
		room = min(room, st.Limit-st.InUse)
	}
	if !mergedRoom(need, room) {
		return 0, nil
	}
	p, err := b.mergedScratch(n)
	if errors.Is(err, runtime.ErrOutOfMemory) {
		return 0, nil
	}
	return p, err
}

// mergedRows checks a merged call's x and weights: ws BF16 on this device,
// adjacent, x BF16 with rows of their D columns. It returns T, D and ΣN;
// ok false when the call is not for this path (not adjacent, not BF16,
// switched off).
func (b *Backend) mergedRows(op string, x *runtime.Tensor, ws []*runtime.Tensor) (T, D, N int, ok bool, err error) {
	if b.NoMergedGEMM || !kernels.Adjacent(ws) || ws[0].DType() != runtime.BF16 {
		return 0, 0, 0, false, nil
	}
	for i, w := range ws {
		if err := b.weight(op, fmt.Sprintf("ws[%d]", i), w); err != nil {
			return 0, 0, 0, false, err
		}
		N += w.Dim(0)
	}
	if err := b.act(op, "x", x); err != nil {
		return 0, 0, 0, false, err
	}
	D = ws[0].Dim(1)
	if D == 0 || x.NumElements()%D != 0 {
		return 0, 0, 0, false, fmt.Errorf("cudabackend.%s: x %v does not have rows of the weights' %d columns", op, x.Shape(), D)
	}
	return x.NumElements() / D, D, N, true, nil
}

// MatMulMerged is kernels.MergedMatMuler: outs[i][T,N_i] = x[T,D]·ws[i]ᵀ
// by one GEMM over the adjacent weights into the scratch [T,ΣN] and one
// column split. ran false, nothing written: the weights are not adjacent or not BF16,
// NoMergedGEMM (FT_MERGED_GEMM=0), more than three weights, or the
// scratch would have to grow during a graph capture.
func (b *Backend) MatMulMerged(outs []*runtime.Tensor, x *runtime.Tensor, ws []*runtime.Tensor) (bool, error) {
	if len(outs) != len(ws) {
		return false, fmt.Errorf("cudabackend.MatMulMerged: %d outputs for %d weights", len(outs), len(ws))
	}
	if len(ws) > 3 {
		return false, nil
	}
	T, D, N, ok, err := b.mergedRows("MatMulMerged", x, ws)
	if !ok || err != nil {
		return false, err
	}
	var ns [3]int
	var ptrs [3]uintptr
	vec := true
	for i, o := range outs {
		if err := b.act("MatMulMerged", fmt.Sprintf("outs[%d]", i), o); err != nil {
			return false, err
		}
		if o.NumElements() != T*ws[i].Dim(0) {
			return false, fmt.Errorf("cudabackend.MatMulMerged: outs[%d] %v, want %d×%d", i, o.Shape(), T, ws[i].Dim(0))
		}
		ns[i], ptrs[i] = ws[i].Dim(0), o.Ptr()
		vec = vec && ns[i]%8 == 0 && aligned16(o.Ptr())
	}
	if T == 0 || N == 0 {
		return true, nil
	}
	scratch, err := b.mergedScratchFor(T, int64(T)*int64(N)*2)
	if err != nil || scratch == 0 {
		return false, err
	}
	if err := b.gemm(scratch, true, x.Ptr(), ws[0].Ptr(), T, N, D, false); err != nil {
		return false, err
	}
	f, div := b.k.merged.split, 1
	if vec && aligned16(scratch) {
		f, div = b.k.merged.splitV8, 8
	}
	n := int64(T) * int64(N) / int64(div)
	return true, f.LaunchBytes(b.s, int64(T)*int64(N)*4, cuda.Dim3{X: b.gridFor(n)}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(ptrs[0]), cuda.Ptr(ptrs[1]), cuda.Ptr(ptrs[2]), cuda.Ptr(scratch),
		cuda.I32(ns[0]/div), cuda.I32(ns[1]/div), cuda.I32(ns[2]/div), cuda.I64(int64(T)))
}

// GateUpSiLUMerged is kernels.MergedGateUpSiLUer: out[T,I] =
// silu(x·wgᵀ)·(x·wuᵀ) by one GEMM over the adjacent gate and up weights
// into the scratch [T,2I] and one silu·mul over its halves. ran false as
// for MatMulMerged.
func (b *Backend) GateUpSiLUMerged(out, x, wg, wu *runtime.Tensor) (bool, error) {
	ws := []*runtime.Tensor{wg, wu}
	T, D, N, ok, err := b.mergedRows("GateUpSiLUMerged", x, ws)
	if !ok || err != nil {
		return false, err
	}
	I := wg.Dim(0)
	if wu.Dim(0) != I {
		return false, fmt.Errorf("cudabackend.GateUpSiLUMerged: gate %v and up %v have different row counts", wg.Shape(), wu.Shape())
	}
	if err := b.act("GateUpSiLUMerged", "out", out); err != nil {
		return false, err
	}
	if out.NumElements() != T*I {
		return false, fmt.Errorf("cudabackend.GateUpSiLUMerged: out %v, want %d×%d", out.Shape(), T, I)
	}
	if T == 0 || I == 0 {
		return true, nil
	}
	scratch, err := b.mergedScratchFor(T, int64(T)*int64(N)*2)
	if err != nil || scratch == 0 {
		return false, err
	}
	if err := b.gemm(scratch, true, x.Ptr(), wg.Ptr(), T, N, D, false); err != nil {
		return false, err
	}
	f, div := b.k.merged.silu, 1
	if I%8 == 0 && aligned16(out.Ptr(), scratch) {
		f, div = b.k.merged.siluV8, 8
	}
	n := int64(T) * int64(I) / int64(div)
	return true, f.LaunchBytes(b.s, int64(T)*int64(I)*6, cuda.Dim3{X: b.gridFor(n)}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(out.Ptr()), cuda.Ptr(scratch), cuda.I32(I/div), cuda.I64(int64(T)))
}
