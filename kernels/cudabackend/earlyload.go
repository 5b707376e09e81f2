//go:build cuda

package cudabackend

import (
	"os"

	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// Early weight loads (kernels/cuda/gemv.cu's top comment): every one-token
// GEMV, BF16 and FP8, has a twin named *_early that issues its first batch
// of 16-byte weight loads into registers before ft_pdl_wait, so that the
// GEMV's ramp hides under the tail of the kernel before it. The backend
// runs the twins unless Backend.NoEarlyWeights (set unless FT_GEMV_PREFETCH=1).
//
// A weight read before the wait may be read while the kernel launched just
// before the GEMV still runs (and only that kernel: see gemv.cu). Weights
// are parameters, written by copies, never by the kernels of a forward;
// the backend ops that write a tensor by kernel and may make weights
// (Fill16, FillUniform, Cast) fence the tensor they write, and the next
// GEMV runs the plain kernel if its weight overlaps a fenced tensor.

// earlyTwins maps each plain BF16 GEMV kernel to its *_early twin.
type earlyTwins map[*cuda.Function]*cuda.Function

// noEarlyWeightsFromEnv is the default of Backend.NoEarlyWeights.
// Off unless FT_GEMV_PREFETCH=1: measured on the H200 (2026-12-01, fourth
// session, bench/h200-s4a.sh) the early loads made the resident decode step
// slower (graph step at context 512: 4.76 ms with them, 4.34 ms without;
// 8,192: 5.30 against 4.85 the session before), as the L2 prefetch before
// them did.
func noEarlyWeightsFromEnv() bool { return os.Getenv("FT_GEMV_PREFETCH") != "1" }

// loadEarly looks up the *_early twins of the BF16 GEMVs of ks.
func (ks *kernelSet) loadEarly(get func(string) *cuda.Function) {
	ks.early = earlyTwins{
		ks.gemvPersist: get("gemv_persist_bf16_early"), ks.gemvPersistF32: get("gemv_persist_f32out_early"),
		ks.gemvAcc: get("gemv_persist_f32acc_early"), ks.gemv3: get("gemv3_bf16_early"), ks.gateUp: get("gemv_gateup_silu_bf16_early"),
		ks.gemv[4]: get("gemv_bf16_u4_early"), ks.gemv[8]: get("gemv_bf16_early"), ks.gemv[16]: get("gemv_bf16_u16_early"),
		ks.gemvF32[8]: get("gemv_bf16_f32out_early"), ks.gemvF32[16]: get("gemv_f32out_u16_early"),
	}
}

// earlyFunctions are the *_early twins (all call ft_pdl_wait: pdl.go).
func (ks *kernelSet) earlyFunctions() []*cuda.Function {
	var fs []*cuda.Function
	for _, f := range ks.early {
		fs = append(fs, f)
	}
	return fs
}

// fence records that t was just written by a kernel (or a driver fill)
// and may be a weight: the GEMVs until the next one launched do not read it
// early.
func (b *Backend) fence(t *runtime.Tensor) {
	if len(b.fenced) >= 64 {
		b.fenceAll = true
		return
	}
	b.fenced = append(b.fenced, [2]uintptr{t.Ptr(), t.Ptr() + uintptr(t.NumBytes())})
}

// earlyLoads reports whether a GEMV over the weights ws may run an
// early-load kernel: on unless NoEarlyWeights, or one of ws overlaps a
// tensor fenced since the last GEMV launch.
func (b *Backend) earlyLoads(ws ...*runtime.Tensor) bool {
	if b.NoEarlyWeights || b.fenceAll {
		return false
	}
	for _, w := range ws {
		lo, hi := w.Ptr(), w.Ptr()+uintptr(w.NumBytes())
		for _, f := range b.fenced {
			if lo < f[1] && f[0] < hi {
				return false
			}
		}
	}
	return true
}

// launchedGEMV lowers the fence: a GEMV is being launched, and the kernels
// after it cannot overlap the fenced writes.
func (b *Backend) launchedGEMV() {
	b.fenced, b.fenceAll = b.fenced[:0], false
}

// gemvKernel is the kernel to launch now for the plain GEMV f over the
// weights ws: its early twin where earlyLoads allows. It lowers the fence:
// the caller launches the kernel next.
func (b *Backend) gemvKernel(f *cuda.Function, ws ...*runtime.Tensor) *cuda.Function {
	if e, ok := b.k.early[f]; ok && b.earlyLoads(ws...) {
		f = e
	}
	b.launchedGEMV()
	return f
}
