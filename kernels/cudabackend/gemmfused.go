//go:build cuda

package cudabackend

import (
	"fmt"
	"os"
	"sync"

	"github.com/flextensor-go/flextensor/kernels"
	kcuda "github.com/flextensor-go/flextensor/kernels/cuda"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// Our own wgmma GEMM with fused epilogues (kernels/cuda/sm90a/extra/
// gemm_fused.cu): TMA copies into a ring of four stages, a producer and two
// consumer warpgroups, a persistent grid, tiles of 128 rows × 256 weight
// rows. For a many-token forward a library GEMM writes its products in
// bf16 for the next kernel to read back, all memory traffic after the
// tensor cores' work; here the epilogue does that kernel's work from the
// fp32 products in registers:
//   - GateUpSiLUFused (kernels.FusedGateUpSiLUer): silu(x·wgᵀ)·(x·wuᵀ);
//     on by default, off with FT_SWIGLU_GEMM=0 (Backend.SwiGLUGEMM);
//   - ProjectRoPEStoreRows (kernels.QKVRoPERowsStorer, qkvgemm.go): q, k,
//     v with RoPE and the KV-cache store; FT_QKV_GEMM=1 (Backend.QKVGEMM).
// It multiplies about as fast as cuBLASLt (s23b: 670 TFLOP/s against
// cuBLASLt's 685 at 32,768 rows, 755 against 707 at 8,192), so the
// traffic saved is the gain. Compute capability 9.0 only, at least
// fusedMinTokens rows, K a multiple of 64.

var _ kernels.FusedGateUpSiLUer = (*Backend)(nil)

// gemmFusedModule is the kernels' module, loaded once.
type gemmFusedModule struct {
	once                  sync.Once
	swigluTMA, qkv, table *cuda.Function // the epilogues store by TMA
	swiglu                *cuda.Function // gate/up storing from registers (SwiGLUStoreRegs)
	err                   error
}

// gemmFused is the loaded module, or nil where it cannot be had (another
// device, no tensor maps, a compile error: FT_TRACE=1 says why).
func (b *Backend) gemmFused() *gemmFusedModule {
	m := &b.fusedGEMM
	m.once.Do(func() {
		m.err = m.load(b.dev, b.FusedGroup)
		if m.err != nil && os.Getenv("FT_TRACE") == "1" {
			fmt.Fprintf(os.Stderr, "trace: fused-epilogue GEMMs not loaded, the separate kernels run: %v\n", m.err)
		}
	})
	if m.err != nil {
		return nil
	}
	return m
}

// load compiles and loads the kernels, with group row tiles a group of
// their tile order where group > 0 (GS_GM; 0: the file's own).
func (m *gemmFusedModule) load(dev *cuda.Device, group int) error {
	if cc := dev.ComputeCapability(); cc != 90 {
		return fmt.Errorf("wgmma needs compute capability 9.0 (sm_90a); %s is %d.%d", dev.Name(), cc/10, cc%10)
	}
	if !dev.TensorMapsSupported() {
		return fmt.Errorf("the driver has no cuTensorMapEncodeTiled")
	}
	src, err := kcuda.SourceSM90aExtra(gemmFusedFile)
	if err != nil {
		return err
	}
	src = gemmFusedDefines(group) + src
	mod, err := dev.LoadModuleArch("flextensor_sm90a_gemm_fused.cu", src, "sm_90a")
	if err != nil {
		return err
	}
	for _, f := range []struct {
		p    **cuda.Function
		name string
		smem int
	}{{&m.swiglu, "gemm_swiglu_bf16", gemmFusedSmem}, {&m.swigluTMA, "gemm_swiglu_tma_bf16", gemmFusedSmemTMA},
		{&m.qkv, "gemm_qkv_rope_tma_bf16", gemmFusedSmemTMA}, {&m.table, "rope_cs_table", 0}} {
		if *f.p, err = mod.Function(f.name); err != nil {
			return err
		}
		if f.smem > 0 {
			if err := (*f.p).SetMaxDynamicSharedMemory(f.smem); err != nil {
				return err
			}
		}
	}
	return nil
}

// matrix is a bf16 matrix of rows rows at device address p, its row
// length given with it to tensorMaps.
type matrix struct {
	p    uintptr
	rows int
}

// tensorMaps are the launch slots of the maps of the bf16 matrices ms
// (each of rows of D columns) for the kernels' boxes of 128 rows × 64
// columns.
func (b *Backend) tensorMaps(op string, D int, ms ...matrix) ([]uint64, error) {
	var slots []uint64
	for _, m := range ms {
		tm, err := b.dev.TensorMapBF16(m.p, D, m.rows, 2*D, 64, 128)
		if err != nil {
			return nil, fmt.Errorf("cudabackend.%s: %w", op, err)
		}
		slots = append(slots, tm.Slots()...)
	}
	return slots, nil
}

// outputMaps are the launch slots of the map of the bf16 output matrix m
// (rows of N columns) for the TMA stores' boxes of 64 rows × 64 columns.
func (b *Backend) outputMaps(op string, m matrix, N int) ([]uint64, error) {
	tm, err := b.dev.TensorMapBF16(m.p, N, m.rows, 2*N, 64, 64)
	if err != nil {
		return nil, fmt.Errorf("cudabackend.%s: %w", op, err)
	}
	return tm.Slots(), nil
}

// launchFused launches f over tiles tiles (at most a block an SM) with
// smem bytes of dynamic shared memory.
func (b *Backend) launchFused(f *cuda.Function, tiles, smem int, bytes int64, args ...uint64) error {
	return f.LaunchBytes(b.s, bytes, cuda.Dim3{X: min(tiles, b.sms)}, cuda.Dim3{X: 384}, smem, args...)
}

// GateUpSiLUFused is kernels.FusedGateUpSiLUer: out[T,I] =
// silu(x·wgᵀ)·(x·wuᵀ) by gemm_swiglu_tma_bf16 (gemm_swiglu_bf16 under
// SwiGLUStoreRegs or where out is not 16-byte aligned). ran false, nothing written:
// switched off, weights not BF16, T below fusedMinTokens, I not a multiple
// of 128 or D of 64, unaligned rows, or no kernel on this device.
func (b *Backend) GateUpSiLUFused(out, x, wg, wu *runtime.Tensor) (bool, error) {
	const op = "GateUpSiLUFused"
	if !b.SwiGLUGEMM || wg.DType() != runtime.BF16 || wu.DType() != runtime.BF16 || len(wg.Shape()) != 2 || len(wu.Shape()) != 2 {
		return false, nil
	}
	if err := checkEach(op, b.weight, named{"wg", wg}, named{"wu", wu}); err != nil {
		return false, err
	}
	if err := checkEach(op, b.act, named{"x", x}, named{"out", out}); err != nil {
		return false, err
	}
	I, D := wg.Dim(0), wg.Dim(1)
	if wu.Dim(0) != I || wu.Dim(1) != D {
		return false, fmt.Errorf("cudabackend.%s: gate %v and up %v differ in shape", op, wg.Shape(), wu.Shape())
	}
	if D == 0 || x.NumElements()%D != 0 {
		return false, fmt.Errorf("cudabackend.%s: x %v does not have rows of the weights' %d columns", op, x.Shape(), D)
	}
	T := x.NumElements() / D
	if out.NumElements() != T*I {
		return false, fmt.Errorf("cudabackend.%s: out %v, want %d×%d", op, out.Shape(), T, I)
	}
	if T < fusedMinTokens || I%128 != 0 || D%64 != 0 || !aligned16(x.Ptr(), wg.Ptr(), wu.Ptr()) || out.Ptr()%4 != 0 {
		return false, nil
	}
	m := b.gemmFused()
	if m == nil {
		return false, nil
	}
	maps, err := b.tensorMaps(op, D, matrix{x.Ptr(), T}, matrix{wg.Ptr(), I}, matrix{wu.Ptr(), I})
	if err != nil {
		return false, err
	}
	f, smem := m.swiglu, gemmFusedSmem
	if b.SwiGLUStore == SwiGLUStoreTMA && aligned16(out.Ptr()) { // TMA stores 16-byte chunks
		om, err := b.outputMaps(op, matrix{out.Ptr(), T}, I)
		if err != nil {
			return false, err
		}
		f, smem = m.swigluTMA, gemmFusedSmemTMA
		maps = append(maps, om...)
	}
	args := append([]uint64{cuda.Ptr(out.Ptr()), cuda.I32(T), cuda.I32(I), cuda.I32(D)}, maps...)
	return true, b.launchFused(f, (T+127)/128*(I/128), smem, int64(T)*int64(D)*2+int64(2*I)*int64(D)*2+int64(T)*int64(I)*2, args...)
}

// named is an operand and its name in errors.
type named struct {
	name string
	t    *runtime.Tensor
}

// checkEach runs check (b.weight, b.act) on each operand in order.
func checkEach(op string, check func(op, name string, t *runtime.Tensor) error, ts ...named) error {
	for _, n := range ts {
		if err := check(op, n.name, n.t); err != nil {
			return err
		}
	}
	return nil
}
