package kernels

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// BiasAdder adds a bias to every row: x[t,n] += bias[n] for x of rows of
// width N and bias of N values (a projection's bias, after its MatMul).
type BiasAdder interface {
	// AddBias adds bias to every row of x in place.
	AddBias(x, bias *runtime.Tensor) error
}

// WindowAttender is Backend.Attention with a sliding window: the query at
// position P sees positions max(0, P−window+1)..P only; window 0 is
// Attention.
type WindowAttender interface {
	// AttentionWindow is Attention where each query sees its last window positions.
	AttentionWindow(out, q, kCache, vCache *runtime.Tensor, pos0, window int) error
}

// AddBias runs b's AddBias (BiasAdder), or says that b has none.
func AddBias(b Backend, x, bias *runtime.Tensor) error {
	f, ok := b.(BiasAdder)
	if !ok {
		return fmt.Errorf("kernels: backend %T on %s cannot add a bias (no AddBias)", b, b.Device().Name())
	}
	return f.AddBias(x, bias)
}

// AttendWindow runs b's Attention, or AttentionWindow when window > 0
// (WindowAttender; a backend without it is an error).
func AttendWindow(b Backend, out, q, kCache, vCache *runtime.Tensor, pos0, window int) error {
	if window == 0 {
		return b.Attention(out, q, kCache, vCache, pos0)
	}
	f, ok := b.(WindowAttender)
	if !ok {
		return fmt.Errorf("kernels: backend %T on %s has no sliding-window attention (window %d)", b, b.Device().Name(), window)
	}
	return f.AttentionWindow(out, q, kCache, vCache, pos0, window)
}

// AddBiasRows computes x[r,c] += bias[c] for the rows of x (len(x)/N of
// them, N = the bias's values; bias of any shape and dtype).
func AddBiasRows(x []float32, bias Mat) error {
	if err := bias.Validate(); err != nil {
		return fmt.Errorf("kernels.AddBias: bias: %w", err)
	}
	n := bias.Rows * bias.Cols
	if n == 0 || len(x)%n != 0 {
		return fmt.Errorf("kernels.AddBias: x has %d values, not a multiple of the bias's %d", len(x), n)
	}
	bf := make([]float32, n)
	if bias.DType == runtime.F32 {
		copy(bf, bias.F32)
	} else {
		bias.widenRows(bf, 0, bias.Rows)
	}
	for r := 0; r < len(x); r += n {
		row := x[r : r+n]
		for c, v := range bf {
			row[c] += v
		}
	}
	return nil
}

// AddBias: x[t,n] += bias[n] (BiasAdder).
func (b *CPUBackend) AddBias(x, bias *runtime.Tensor) error {
	bm, err := AsMat(bias)
	if err != nil {
		return err
	}
	xv, err := f32("AddBias x", x)
	if err != nil {
		return err
	}
	if x.Dim(-1) != bm.Rows*bm.Cols {
		return fmt.Errorf("kernels.AddBias: x %v, bias %v: want rows as wide as the bias", x.Shape(), bias.Shape())
	}
	return AddBiasRows(xv, bm)
}
