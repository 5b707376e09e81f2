//go:build cuda

package cudabackend

import (
	"errors"
	"fmt"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

var _ kernels.FP8MLPer = (*Backend)(nil)

// FusesFP8MLP is kernels.FP8MLPer: MLPFP8 of rows tokens runs fused where
// the weights are per channel and that many tokens take the FP8 tensor
// cores (FusesFP8Rows), unless NoFP8Fuse (FT_FP8_FUSE=0).
func (b *Backend) FusesFP8MLP(rows int, layout kernels.FP8Layout) bool {
	return !b.NoFP8Fuse && layout.Block == 0 && rows > 1 && b.FusesFP8Rows(rows)
}

// MLPFP8 is kernels.FP8MLPer on the GPU. Fused (mlpFP8Fused), five
// launches:
//
//  1. quant_rows_e4m3: x's rows to E4M3 codes and token scales xs;
//  2. two cuBLASLt FP8 GEMMs: the unscaled gate and up products
//     Σ codes·codes, fp32 accumulation, rounded to bf16 into g and u;
//  3. fp8_silu_quant_rows: h = silu(g·xs·sg)·(u·xs·su) in fp32 (not
//     rounded to bf16) and each row of h to E4M3 codes and a scale hs;
//  4. the down GEMM: the unscaled product into y (or, with add, into tmp,
//     fp32);
//  5. fp8_rescale: y ·= hs·sd in place, or, with add, fp8_rescale_add:
//     y += tmp·(hs·sd) (one fp32 rounding of the product, one of the sum).
//
// So the bf16 roundings are those of the gate and up products before
// their scales, the E4M3 ones of x and h, and the output's (twice for a
// bf16 y without add: the unscaled product, then the rescaled value; the
// decoder passes an fp32 y); the unfused
// path also rounds the rescaled gate and up, and silu·up, to bf16. The
// scales are never folded into cuBLASLt here (its outer-vector scales, where
// it has them, would still leave the SiLU and quantization passes).
//
// Where the fused path does not apply (FusesFP8MLP false, a shape or an
// alignment it does not take, different scale dtypes for gate and up, a
// GEMM cuBLASLt refuses) it runs GateUpSiLUFP8 and MatMulFP8 (into tmp and
// Add, with add): the same values as the decoder's unfused ops.
func (b *Backend) MLPFP8(y, x, g, u, tmp *runtime.Tensor, m kernels.FP8MLP, add bool) error {
	for _, a := range []struct {
		n string
		t *runtime.Tensor
	}{{"x", x}, {"g", g}, {"u", u}} {
		if err := b.act("MLPFP8", a.n, a.t); err != nil {
			return err
		}
	}
	if err := b.onDevice("MLPFP8", "y", y); err != nil {
		return err
	}
	for _, w := range []struct {
		n    string
		w, s *runtime.Tensor
	}{{"gate", m.Gate, m.GateScale}, {"up", m.Up, m.UpScale}, {"down", m.Down, m.DownScale}} {
		if w.w == nil || w.s == nil {
			return fmt.Errorf("cudabackend.MLPFP8: the %s weight or its scale is nil", w.n)
		}
		if err := b.checkFP8Weight("MLPFP8 "+w.n, w.w, w.s, m.Layout); err != nil {
			return err
		}
	}
	D := x.Dim(-1)
	I := m.Gate.Dim(0)
	if D <= 0 || x.NumElements()%D != 0 || m.Gate.Dim(1) != D || !m.Up.Shape().Equal(m.Gate.Shape()) || m.Down.Dim(0) != D || m.Down.Dim(1) != I {
		return fmt.Errorf("cudabackend.MLPFP8: x %v, gate %v, up %v, down %v: want x rows of D, gate and up [I,D], down [D,I]",
			x.Shape(), m.Gate.Shape(), m.Up.Shape(), m.Down.Shape())
	}
	T := x.NumElements() / D
	if g.NumElements() != T*I || u.NumElements() != T*I || y.NumElements() != T*D {
		return fmt.Errorf("cudabackend.MLPFP8: g %v, u %v, y %v for %d rows: want [%d,%d], [%d,%d], [%d,%d]",
			g.Shape(), u.Shape(), y.Shape(), T, T, I, T, I, T, D)
	}
	if add {
		if y.DType() != runtime.F32 {
			return fmt.Errorf("cudabackend.MLPFP8: add into y %v, want F32 (the residual stream)", y.DType())
		}
		if tmp == nil {
			return errors.New("cudabackend.MLPFP8: add needs tmp, an F32 scratch of y's shape; got nil")
		}
		if err := b.onDevice("MLPFP8", "tmp", tmp); err != nil {
			return err
		}
		if tmp.DType() != runtime.F32 || tmp.NumElements() != T*D {
			return fmt.Errorf("cudabackend.MLPFP8: tmp %v %v, want F32 of %d elements", tmp.DType(), tmp.Shape(), T*D)
		}
	} else if y.DType() != runtime.BF16 && y.DType() != runtime.F32 {
		return fmt.Errorf("cudabackend.MLPFP8: y is %v, want BF16 or F32", y.DType())
	}
	if T == 0 {
		return nil
	}
	if ran, err := b.mlpFP8Fused(y, x, g, u, tmp, m, add, T, D, I); ran || err != nil {
		return err
	}
	if err := b.GateUpSiLUFP8(g, u, x, m.Gate, m.Up, m.GateScale, m.UpScale, m.Layout); err != nil {
		return err
	}
	if !add {
		return b.MatMulFP8(y, g, m.Down, m.DownScale, m.Layout)
	}
	if err := b.MatMulFP8(tmp, g, m.Down, m.DownScale, m.Layout); err != nil {
		return err
	}
	return b.Add(y, y, tmp)
}

// fp8MLPScratch returns the fused MLP's scratch: x's codes and token scales
// where matMulFP8LtN puts them, then, where that path puts converted
// weight scales (none here), h's T·I codes (256-byte aligned) and T scales.
func (b *Backend) fp8MLPScratch(T, D, I int) (xq, xs, hq, hs uintptr, err error) {
	codes := (int64(T)*int64(I) + 255) / 256 * 256
	buf, err := b.fp8Scratch(T, D, int((codes+4*int64(T)+3)/4))
	if err != nil {
		return 0, 0, 0, 0, err
	}
	base := buf.Ptr()
	xq, xs = base, base+uintptr(fp8ScaleOffset(T, D))
	hq = base + uintptr(fp8WScaleOffset(T, D))
	return xq, xs, hq, hq + uintptr(codes), nil
}

// mlpFP8Fused is MLPFP8's fused path (see MLPFP8); ran is false, with
// nothing written that the unfused path does not overwrite (g, u and the
// scratch only; y untouched), where it does not apply. Arguments are
// checked by MLPFP8.
func (b *Backend) mlpFP8Fused(y, x, g, u, tmp *runtime.Tensor, m kernels.FP8MLP, add bool, T, D, I int) (ran bool, err error) {
	if !b.FusesFP8MLP(T, m.Layout) || !b.fp8LtApplies(m.Layout, T, D, x.Ptr()) || I%16 != 0 ||
		m.GateScale.DType() != m.UpScale.DType() ||
		!aligned16(g.Ptr(), u.Ptr(), m.Gate.Ptr(), m.Up.Ptr(), m.Down.Ptr(), m.GateScale.Ptr(), m.UpScale.Ptr(), y.Ptr()) {
		return false, nil
	}
	raw := y // the down GEMM's unscaled product
	if add {
		raw = tmp
		if !aligned16(tmp.Ptr()) {
			return false, nil
		}
	}
	rawBF16 := raw.DType() == runtime.BF16
	fast := b.FP8GEMM == FP8GEMMLtFast
	xq, xs, hq, hs, err := b.fp8MLPScratch(T, D, I)
	if err != nil {
		return false, err
	}
	refused := func(err error) (bool, error) {
		if errors.Is(err, cuda.ErrFP8Unsupported) {
			b.noteFP8Fallback(err)
			return false, nil
		}
		return false, err
	}
	for _, r := range []struct {
		c       uintptr
		bf16    bool
		a, w    uintptr
		n, k    int
		whyName string
	}{{g.Ptr(), true, xq, m.Gate.Ptr(), I, D, "gate"}, {u.Ptr(), true, xq, m.Up.Ptr(), I, D, "up"}, {raw.Ptr(), rawBF16, hq, m.Down.Ptr(), D, I, "down"}} {
		if err := b.blas.FP8Ready(r.c, r.bf16, r.a, r.w, T, r.n, r.k, fast); err != nil {
			return refused(fmt.Errorf("MLPFP8 %s: %w", r.whyName, err))
		}
	}
	if err := b.k.fp8gemm.quant.LaunchBytes(b.s, int64(T)*int64(D)*3+4*int64(T), cuda.Dim3{X: T}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(xq), cuda.Ptr(xs), cuda.Ptr(x.Ptr()), cuda.I32(T), cuda.I32(D), cuda.Ptr(0),
		cuda.Ptr(0), cuda.Ptr(0), cuda.Ptr(0), cuda.I32(0), cuda.I32(0), cuda.I32(0), cuda.I32(0)); err != nil {
		return false, err
	}
	// A GEMM refused at the call (after FP8Ready said yes) leaves y as it
	// was: the unfused path then recomputes everything from x.
	if err := b.blas.GemmFP8(b.s, g.Ptr(), true, xq, m.Gate.Ptr(), T, I, D, fast); err != nil {
		return refused(err)
	}
	if err := b.blas.GemmFP8(b.s, u.Ptr(), true, xq, m.Up.Ptr(), T, I, D, fast); err != nil {
		return refused(err)
	}
	ti := int64(T) * int64(I)
	if err := b.k.fp8gemm.siluQuant.LaunchBytes(b.s, 5*ti+4*int64(T)*2+m.GateScale.NumBytes()+m.UpScale.NumBytes(),
		cuda.Dim3{X: T}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(hq), cuda.Ptr(hs), cuda.Ptr(g.Ptr()), cuda.Ptr(u.Ptr()), cuda.Ptr(xs),
		cuda.Ptr(m.GateScale.Ptr()), cuda.Ptr(m.UpScale.Ptr()), cuda.I32(int(m.GateScale.DType())), cuda.I32(T), cuda.I32(I)); err != nil {
		return true, err
	}
	if err := b.blas.GemmFP8(b.s, raw.Ptr(), rawBF16, hq, m.Down.Ptr(), T, D, I, fast); err != nil {
		return refused(err)
	}
	n := int64(T) * int64(D)
	sd := m.DownScale
	if add {
		return true, b.k.fp8gemm.rescaleAdd.LaunchBytes(b.s, 3*4*n+sd.NumBytes()+4*int64(T),
			cuda.Dim3{X: b.gridFor(n / 8)}, cuda.Dim3{X: 256}, 0,
			cuda.Ptr(y.Ptr()), cuda.Ptr(tmp.Ptr()), cuda.Ptr(hs), cuda.Ptr(sd.Ptr()), cuda.I32(int(sd.DType())), cuda.I32(T), cuda.I32(D))
	}
	outF32 := 1
	if rawBF16 {
		outF32 = 0
	}
	return true, b.k.fp8gemm.rescale.LaunchBytes(b.s, 2*n*int64(y.DType().Size())+sd.NumBytes()+4*int64(T),
		cuda.Dim3{X: b.gridFor(n / 8)}, cuda.Dim3{X: 256}, 0,
		cuda.Ptr(y.Ptr()), cuda.I32(outF32), cuda.Ptr(hs), cuda.Ptr(sd.Ptr()), cuda.I32(int(sd.DType())), cuda.I32(T), cuda.I32(D))
}
