//go:build cuda

package cudabackend

import (
	"os"
	"sync"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// The one-token GEMVs with the RMSNorm in front of them folded in
// (kernels.NormProjector; kernels/cuda/gemv.cu's norm_x_smem): each block
// normalises the F32 residual itself into shared memory, with the sums and
// roundings of rmsnorm_f32in_bf16 at that kernel's block size, so the
// projections see the bits RMSNorm would write. Backend.NoFusedNorm
// turns them off, the default: the decoder then runs RMSNorm and the plain
// GEMVs.

// noFusedNormFromEnv is the default of Backend.NoFusedNorm: set unless
// FT_FUSE_NORM=1. Measured on the H200 (2026-12-01, bench/h200-s4b.sh),
// folding made the resident decode slower: run-model 4.51 against 4.32 ms a
// token, graph step at context 512 4.56 against 4.35 ms (every block's own
// reduction of the residual costs more than the launch it saves).
func noFusedNormFromEnv() bool { return os.Getenv("FT_FUSE_NORM") != "1" }

// normKernels are the folded-norm GEMVs.
type normKernels struct {
	gemv3, gateUp, f32out *cuda.Function

	mu   sync.Mutex
	wave map[normWaveKey]int // blocks of 256 threads resident at once
}

type normWaveKey struct {
	f    *cuda.Function
	smem int
}

// loadNorm looks up the folded-norm GEMVs.
func loadNorm(get func(string) *cuda.Function) *normKernels {
	return &normKernels{gemv3: get("gemv3_norm_bf16"), gateUp: get("gemv_gateup_silu_norm_bf16"), f32out: get("gemv_persist_norm_f32out"),
		wave: map[normWaveKey]int{}}
}

// functions are the folded-norm GEMVs.
func (k *normKernels) functions() []*cuda.Function {
	return []*cuda.Function{k.gemv3, k.gateUp, k.f32out}
}

// rmsF32Threads is the block size of rmsnorm_f32in_bf16 for rows of dim
// values (Backend.RMSNorm's for an F32 x): the folded-norm kernels
// reproduce its sums at that size.
func rmsF32Threads(dim int) int { return min(1024, max(32, (dim/4+31)/32*32)) }

// normWave is the grid of a persistent folded-norm GEMV f over rows rows
// with smem bytes of dynamic shared memory: every block resident at once,
// at most one warp a row.
func (b *Backend) normWave(f *cuda.Function, smem, rows int) (int, error) {
	k := b.k.norm
	k.mu.Lock()
	defer k.mu.Unlock()
	key := normWaveKey{f, smem}
	n, ok := k.wave[key]
	if !ok {
		per, err := f.MaxActiveBlocksPerSM(256, smem)
		if err != nil {
			return 0, err
		}
		n = max(1, per) * b.sms
		k.wave[key] = n
	}
	return max(1, min(n, (rows+7)/8)), nil
}

// here reports whether t is a tensor on b's device.
func (b *Backend) here(t *runtime.Tensor) bool {
	return t != nil && t.Device() == runtime.Device(b.dev)
}

// normOperands checks the residual x (one F32 row of D values, 16-byte
// aligned), the norm weight (BF16 [D]) and the weights ws (BF16 [N,D],
// 16-byte aligned): ok is whether the folded kernels take them.
func (b *Backend) normOperands(x, nw *runtime.Tensor, ws ...*runtime.Tensor) (D int, ok bool) {
	if b.NoFusedNorm || x == nil || nw == nil || !b.here(x) || !b.here(nw) {
		return 0, false
	}
	D = x.Dim(-1)
	if x.DType() != runtime.F32 || x.NumElements() != D || D == 0 || D%8 != 0 || 2*D > 48<<10 ||
		nw.DType() != runtime.BF16 || nw.NumElements() != D || !aligned16(x.Ptr()) || nw.Ptr()%4 != 0 {
		return 0, false
	}
	for _, w := range ws {
		if !b.here(w) || w.DType() != runtime.BF16 || len(w.Shape()) != 2 || w.Dim(1) != D || !aligned16(w.Ptr()) {
			return 0, false
		}
	}
	return D, true
}

// NormMatMulN: q, k and v of RMSNorm(x) in one gemv3_norm_bf16 launch
// (kernels.NormProjector).
func (b *Backend) NormMatMulN(outs []*runtime.Tensor, x, nw *runtime.Tensor, eps float32, ws []*runtime.Tensor) (bool, error) {
	if len(outs) != 3 || len(ws) != 3 {
		return false, nil
	}
	D, ok := b.normOperands(x, nw, ws...)
	if !ok {
		return false, nil
	}
	for i, o := range outs {
		if !b.here(o) || o.DType() != runtime.BF16 || o.NumElements() != ws[i].Dim(0) {
			return false, nil
		}
	}
	N0, N1, N2 := ws[0].Dim(0), ws[1].Dim(0), ws[2].Dim(0)
	f := b.k.norm.gemv3
	grid, err := b.normWave(f, 2*D, N0+N1+N2)
	if err != nil {
		return false, err
	}
	return true, f.LaunchBytes(b.s, gemvBytes(N0+N1+N2, D, outs[0])+int64(D)*4, cuda.Dim3{X: grid}, cuda.Dim3{X: 256}, 2*D,
		cuda.Ptr(outs[0].Ptr()), cuda.Ptr(outs[1].Ptr()), cuda.Ptr(outs[2].Ptr()), cuda.Ptr(x.Ptr()),
		cuda.Ptr(nw.Ptr()), cuda.F32(eps), cuda.I32(rmsF32Threads(D)),
		cuda.Ptr(ws[0].Ptr()), cuda.Ptr(ws[1].Ptr()), cuda.Ptr(ws[2].Ptr()), cuda.I32(N0), cuda.I32(N1), cuda.I32(N2), cuda.I32(D))
}

// NormGateUpSiLU: silu(gate)·up of RMSNorm(x) in one
// gemv_gateup_silu_norm_bf16 launch (kernels.NormProjector).
func (b *Backend) NormGateUpSiLU(out, x, nw *runtime.Tensor, eps float32, wg, wu *runtime.Tensor) (bool, error) {
	D, ok := b.normOperands(x, nw, wg, wu)
	if !ok || !wg.Shape().Equal(wu.Shape()) || !b.here(out) || out.DType() != runtime.BF16 ||
		out.NumElements() != wg.Dim(0) {
		return false, nil
	}
	N := wg.Dim(0)
	f := b.k.norm.gateUp
	grid, err := b.normWave(f, 2*D, N)
	if err != nil {
		return false, err
	}
	return true, f.LaunchBytes(b.s, gemvBytes(2*N, D, out)-int64(N)*2+int64(D)*4, cuda.Dim3{X: grid}, cuda.Dim3{X: 256}, 2*D,
		cuda.Ptr(out.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(nw.Ptr()), cuda.F32(eps), cuda.I32(rmsF32Threads(D)),
		cuda.Ptr(wg.Ptr()), cuda.Ptr(wu.Ptr()), cuda.I32(N), cuda.I32(D))
}

// NormMatMul: RMSNorm(x)·wᵀ into an F32 out (the LM head's logits) in one
// gemv_persist_norm_f32out launch (kernels.NormProjector); a BF16 out is
// not fused.
func (b *Backend) NormMatMul(out, x, nw *runtime.Tensor, eps float32, w *runtime.Tensor) (bool, error) {
	D, ok := b.normOperands(x, nw, w)
	if !ok || !b.here(out) || out.DType() != runtime.F32 || out.NumElements() != w.Dim(0) {
		return false, nil
	}
	N := w.Dim(0)
	f := b.k.norm.f32out
	grid, err := b.normWave(f, 2*D, N)
	if err != nil {
		return false, err
	}
	return true, f.LaunchBytes(b.s, gemvBytes(N, D, out)+int64(D)*4, cuda.Dim3{X: grid}, cuda.Dim3{X: 256}, 2*D,
		cuda.Ptr(out.Ptr()), cuda.Ptr(x.Ptr()), cuda.Ptr(nw.Ptr()), cuda.F32(eps), cuda.I32(rmsF32Threads(D)),
		cuda.Ptr(w.Ptr()), cuda.I32(N), cuda.I32(D))
}

var _ kernels.NormProjector = (*Backend)(nil)
