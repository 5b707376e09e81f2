//go:build cuda

package cuda

import (
	"errors"
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// blasWorkspace is the cuBLAS workspace each handle gets: set explicitly so
// that GEMMs captured into a CUDA graph allocate nothing (32 MiB, the size
// cuBLAS recommends on Hopper).
const blasWorkspace = 32 << 20

// BLAS is a cuBLAS handle with its own workspace.
type BLAS struct {
	dev *Device
	h   cBLAS
	ws  *runtime.DeviceBuffer
	lt  blasLt // the cuBLASLt handle of GemmFP8 (blaslt.go), made on first use
	// tune is GemmBF16Tuned's cuBLASLt handle and per-shape choices
	// (gemmtune.go), made on first use.
	tune gemmTuner
	// TuneSustained makes GemmBF16Tuned time a new shape's candidates
	// after a lead-in of sustained work (gemmSustainLead), their samples
	// taken in turns, so that the choice is the fastest at the clocks a
	// long prefill runs at rather than on a cool GPU, and no candidate is
	// favoured by its place in the order. Set it before the first GEMM.
	TuneSustained bool
}

// NewBLAS creates a cuBLAS handle on this device.
func (d *Device) NewBLAS() (*BLAS, error) {
	ws, err := d.Alloc(blasWorkspace, "cuBLAS workspace")
	if err != nil {
		return nil, err
	}
	h, err := cBLASCreate(d.ctx, d.compute.s, ws.Ptr(), blasWorkspace)
	if err != nil {
		ws.Free()
		return nil, fmt.Errorf("%s: %w", d.Name(), err)
	}
	b := &BLAS{dev: d, h: h, ws: ws}
	d.mu.Lock()
	d.blas = append(d.blas, b)
	d.mu.Unlock()
	return b, nil
}

func (b *BLAS) close() error {
	err := errors.Join(b.lt.close(b.dev), b.tune.close(b.dev), cBLASDestroy(b.dev.ctx, b.h))
	b.ws.Free()
	return err
}

// GemmBF16 enqueues on s, row-major, c[m,n] = a[m,k]·b[n,k]ᵀ (a linear layer:
// a holds m rows of inputs, b the weights) with bf16 a and b, fp32
// accumulation, and c in bf16 (cBF16) or fp32. Arguments are device addresses.
func (b *BLAS) GemmBF16(s *Stream, c uintptr, cBF16 bool, a, w uintptr, m, n, k int) error {
	if m <= 0 || n <= 0 || k <= 0 {
		return fmt.Errorf("cuBLAS GEMM %dx%dx%d: sizes must be positive", m, n, k)
	}
	cBytes := int64(2)
	if !cBF16 {
		cBytes = 4
	}
	bytes := 2*int64(m)*int64(k) + 2*int64(n)*int64(k) + cBytes*int64(m)*int64(n)
	return b.dev.timed(s, fmt.Sprintf("cublasGemmEx[m=%d,n=%d,k=%d]", m, n, k), bytes, func() error {
		st := cGemmRowMajor(b.dev.ctx, b.h, s.s, c, cBF16, a, w, m, n, k)
		if err := checkBLAS(fmt.Sprintf("cublasGemmEx bf16 [%d,%d]x[%d,%d]T", m, k, n, k), st); err != nil {
			return fmt.Errorf("%s: %w", b.dev.Name(), err)
		}
		return nil
	})
}
