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

// The gated MLP's gate and up projections as one GEMM with silu·mul in its
// epilogue (kernels.FusedGateUpSiLUer; kernels/cuda/sm90a/extra/
// gemm_swiglu.cu): for a many-token forward the separate path writes the
// two products [T,2I] in bf16 and a silu·mul reads them back, all memory
// traffic after the tensor cores' work; here the products stay in the
// kernel's registers. Our own wgmma GEMM (TMA copies into a stage ring,
// a producer and two consumer warpgroups, persistent), so it pays only if
// it multiplies about as fast as cuBLASLt (s23b: 670 TFLOP/s against
// cuBLASLt's 685 at 32,768 rows, 755 against 707 at 8,192, the silu·mul's
// traffic saved besides). On by default, off with FT_SWIGLU_GEMM=0
// (Backend.SwiGLUGEMM); compute capability 9.0 only, I a multiple of 128,
// D of 64, at least swigluMinTokens rows.

var _ kernels.FusedGateUpSiLUer = (*Backend)(nil)

// swigluModule is the kernel's module, loaded once.
type swigluModule struct {
	once sync.Once
	f    *cuda.Function
	err  error
}

// swigluKernel is the fused kernel, or nil where it cannot be had (another
// device, no tensor maps, a compile error: FT_TRACE=1 says why).
func (b *Backend) swigluKernel() *cuda.Function {
	m := &b.swiglu
	m.once.Do(func() {
		m.f, m.err = loadSwiGLU(b.dev)
		if m.err != nil && os.Getenv("FT_TRACE") == "1" {
			fmt.Fprintf(os.Stderr, "trace: fused gate/up GEMM not loaded, the separate GEMMs run: %v\n", m.err)
		}
	})
	return m.f
}

func loadSwiGLU(dev *cuda.Device) (*cuda.Function, error) {
	if cc := dev.ComputeCapability(); cc != 90 {
		return nil, fmt.Errorf("wgmma needs compute capability 9.0 (sm_90a); %s is %d.%d", dev.Name(), cc/10, cc%10)
	}
	if !dev.TensorMapsSupported() {
		return nil, fmt.Errorf("the driver has no cuTensorMapEncodeTiled")
	}
	src, err := kcuda.SourceSM90aExtra(swigluFile)
	if err != nil {
		return nil, err
	}
	mod, err := dev.LoadModuleArch("flextensor_sm90a_gemm_swiglu.cu", src, "sm_90a")
	if err != nil {
		return nil, err
	}
	f, err := mod.Function("gemm_swiglu_bf16")
	if err != nil {
		return nil, err
	}
	return f, f.SetMaxDynamicSharedMemory(swigluSmem)
}

// GateUpSiLUFused is kernels.FusedGateUpSiLUer: out[T,I] =
// silu(x·wgᵀ)·(x·wuᵀ) by the fused kernel. ran false, nothing written:
// switched off, weights not BF16, T below swigluMinTokens, I not a
// multiple of 128 or D of 64, unaligned rows, or no kernel on this device.
func (b *Backend) GateUpSiLUFused(out, x, wg, wu *runtime.Tensor) (bool, error) {
	const op = "GateUpSiLUFused"
	if !b.SwiGLUGEMM || wg.DType() != runtime.BF16 || wu.DType() != runtime.BF16 || len(wg.Shape()) != 2 || len(wu.Shape()) != 2 {
		return false, nil
	}
	for _, c := range []struct {
		name string
		t    *runtime.Tensor
	}{{"wg", wg}, {"wu", wu}} {
		if err := b.weight(op, c.name, c.t); err != nil {
			return false, err
		}
	}
	for _, c := range []struct {
		name string
		t    *runtime.Tensor
	}{{"x", x}, {"out", out}} {
		if err := b.act(op, c.name, c.t); err != nil {
			return false, err
		}
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
	if T < swigluMinTokens || I%128 != 0 || D%64 != 0 || !aligned16(x.Ptr(), wg.Ptr(), wu.Ptr()) || out.Ptr()%4 != 0 {
		return false, nil
	}
	f := b.swigluKernel()
	if f == nil {
		return false, nil
	}
	args := []uint64{cuda.Ptr(out.Ptr()), cuda.I32(T), cuda.I32(I), cuda.I32(D)}
	for _, m := range []struct {
		p    uintptr
		rows int
	}{{x.Ptr(), T}, {wg.Ptr(), I}, {wu.Ptr(), I}} {
		tm, err := b.dev.TensorMapBF16(m.p, D, m.rows, 2*D, 64, 128)
		if err != nil {
			return false, fmt.Errorf("cudabackend.%s: %w", op, err)
		}
		args = append(args, tm.Slots()...)
	}
	tiles := (T + 127) / 128 * (I / 128)
	return true, f.LaunchBytes(b.s, int64(T)*int64(D)*2+int64(2*I)*int64(D)*2+int64(T)*int64(I)*2,
		cuda.Dim3{X: min(tiles, b.sms)}, cuda.Dim3{X: 384}, swigluSmem, args...)
}
