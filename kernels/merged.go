package kernels

import "github.com/flextensor-go/flextensor/runtime"

// MergedMatMuler runs several projections of one input as ONE GEMM when
// their weights lie back to back in device memory: for ws[i] [N_i,D] with
// ws[i+1] starting where ws[i] ends (Adjacent), the weights together are the
// matrix [ΣN_i,D], so outs[i][T,N_i] = x[T,D]·ws[i]ᵀ come from one product
// x·[ΣN_i,D]ᵀ into a scratch [T,ΣN_i] and one launch that splits its
// columns. It serves several-token forwards (a prefill, a batched decode)
// whose q, k and v each are a small GEMM that cannot fill the GPU alone.
//
// ran is false (and nothing is written) when the backend does not take the
// call as it stands: weights not adjacent, not BF16, the path switched off;
// the caller then runs one MatMul per weight. The results equal the
// per-weight MatMuls up to the summation order of the GEMM algorithm the
// backend picks for the merged shape.
type MergedMatMuler interface {
	// MatMulMerged computes outs[i] = x·ws[i]ᵀ as one GEMM, or reports ran false.
	MatMulMerged(outs []*runtime.Tensor, x *runtime.Tensor, ws []*runtime.Tensor) (ran bool, err error)
}

// MergedGateUpSiLUer is MergedMatMuler for a gated MLP: when wu starts where
// wg ends (Adjacent), out[T,I] = silu(x·wgᵀ)·(x·wuᵀ) comes from one GEMM
// x·[2I,D]ᵀ into a scratch [T,2I] and one launch that applies silu·mul
// while reading its two halves (so gate, up and SiLUMul become two
// launches). ran false: not taken, nothing written, as for MatMulMerged.
type MergedGateUpSiLUer interface {
	// GateUpSiLUMerged computes out = silu(x·wgᵀ)·(x·wuᵀ) from one GEMM, or reports ran false.
	GateUpSiLUMerged(out, x, wg, wu *runtime.Tensor) (ran bool, err error)
}

// FusedGateUpSiLUer runs a gated MLP's gate and up projections for many
// rows as one GEMM whose epilogue applies silu·mul: out[T,I] =
// silu(x·wgᵀ)·(x·wuᵀ), the two products never written out (they stay in
// fp32 until the silu·mul, where the separate path rounds each to BF16).
// Unlike MergedGateUpSiLUer the weights need not be adjacent. ran false:
// the backend does not take the call (device, shapes, switched off),
// nothing written; the caller runs the other paths.
type FusedGateUpSiLUer interface {
	// GateUpSiLUFused computes out = silu(x·wgᵀ)·(x·wuᵀ) as one fused GEMM, or reports ran false.
	GateUpSiLUFused(out, x, wg, wu *runtime.Tensor) (ran bool, err error)
}

// Adjacent reports whether ws are back to back in one device buffer, each
// starting where the one before ends (by offset in the buffer and by device
// address on a GPU), all 2-D of one dtype and one column count: their rows together
// are then the one matrix [ΣN_i,D] a merged GEMM reads. Fewer than two
// weights, or a nil one, is not adjacent.
func Adjacent(ws []*runtime.Tensor) bool {
	if len(ws) < 2 {
		return false
	}
	for _, w := range ws {
		if w == nil || w.Buffer() == nil || len(w.Shape()) != 2 {
			return false
		}
	}
	for i := 1; i < len(ws); i++ {
		p, w := ws[i-1], ws[i]
		if w.Buffer() != p.Buffer() || w.DType() != p.DType() || w.Dim(1) != p.Dim(1) {
			return false
		}
		if w.Offset() != p.Offset()+p.NumBytes() {
			return false
		}
		if p.Ptr() != 0 && w.Ptr() != p.Ptr()+uintptr(p.NumBytes()) { // host buffers have no device address
			return false
		}
	}
	return true
}
