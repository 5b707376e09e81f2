package kernels

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// FP8 weights. A quantized Linear holds its weight as 8-bit floats q[N,D]
// (runtime.F8E4M3, or F8E5M2 on the CPU) and a tensor of dequantization
// scales; the weight it stands for is w[n,k] = float32(q[n,k]) · s(n,k),
// s read from the scales as the layout says:
//
//   - per output channel (Block 0): scale[N,1] (or [N]); s(n,k) = scale[n]
//     — compressed-tensors "float-quantized" with strategy "channel", and
//     what --stream-dtype fp8 makes;
//   - per B×B block (Block B): scale[⌈N/B⌉,⌈D/B⌉]; s(n,k) = scale[n/B,k/B],
//     the blocks at the bottom and right edges partial — the "fp8"
//     quant_method's weight_scale_inv (DeepSeek-V3, Qwen3 -FP8).
//
// Scales are F32, BF16 or F16. The matmul is W8A16 (weight-only): the
// activations stay in the backend's ActDType and the products accumulate in
// float32, so its result is the matmul with the dequantized weight.

// FP8Layout is how an FP8 weight's scales are laid out.
type FP8Layout struct {
	Block int // 0: one scale per output row; B > 0: one per B×B block
}

// String is "per-channel" or "block BxB".
func (l FP8Layout) String() string {
	if l.Block == 0 {
		return "per-channel"
	}
	return fmt.Sprintf("block %dx%d", l.Block, l.Block)
}

// ScaleShape is the shape of the scales of a weight [n, k] in this layout:
// [n, 1] per channel, [⌈n/B⌉, ⌈k/B⌉] per block.
func (l FP8Layout) ScaleShape(n, k int) runtime.Shape {
	if l.Block <= 0 {
		return runtime.Shape{n, 1}
	}
	return runtime.Shape{(n + l.Block - 1) / l.Block, (k + l.Block - 1) / l.Block}
}

// FP8MatMuler is a backend that multiplies by FP8 weights:
// out[T,N] = x[T,D]·dequant(w[N,D], scale)ᵀ, F32 accumulation.
type FP8MatMuler interface {
	// MatMulFP8 computes out = x·dequant(w, scale)ᵀ.
	MatMulFP8(out, x, w, scale *runtime.Tensor, layout FP8Layout) error
}

// MatMulFP8 runs b's MatMulFP8, or says that b has none.
func MatMulFP8(b Backend, out, x, w, scale *runtime.Tensor, layout FP8Layout) error {
	f, ok := b.(FP8MatMuler)
	if !ok {
		return fmt.Errorf("kernels: backend %T on %s cannot multiply by FP8 weights (no MatMulFP8)", b, b.Device().Name())
	}
	return f.MatMulFP8(out, x, w, scale, layout)
}

// CheckFP8 validates an FP8 weight and its scales for a matmul: w is a
// rank-2 F8 tensor [N,D], scale is F32, BF16 or F16 of the layout's shape
// ([N] is accepted for [N,1]). Errors name what is wrong.
func CheckFP8(w, scale *runtime.Tensor, layout FP8Layout) error {
	if w.DType() != runtime.F8E4M3 && w.DType() != runtime.F8E5M2 {
		return fmt.Errorf("kernels.MatMulFP8: weight is %v, want F8_E4M3 or F8_E5M2", w.DType())
	}
	if len(w.Shape()) != 2 {
		return fmt.Errorf("kernels.MatMulFP8: weight of shape %v, want [N,D]", w.Shape())
	}
	switch scale.DType() {
	case runtime.F32, runtime.BF16, runtime.F16:
	default:
		return fmt.Errorf("kernels.MatMulFP8: scale is %v, want F32, BF16 or F16", scale.DType())
	}
	if layout.Block < 0 {
		return fmt.Errorf("kernels.MatMulFP8: negative block size %d", layout.Block)
	}
	n, k := w.Dim(0), w.Dim(1)
	want := layout.ScaleShape(n, k)
	if !scale.Shape().Equal(want) && !(layout.Block == 0 && scale.Shape().Equal(runtime.Shape{n})) {
		return fmt.Errorf("kernels.MatMulFP8: scale of shape %v for a %v weight %v, want %v", scale.Shape(), layout, w.Shape(), want)
	}
	return nil
}

// QMat is an FP8 matrix in host memory: Q[r*Cols+c] holds element (r,c)
// in DType (F8E4M3 or F8E5M2); Scale (widened to float32) is laid out as
// Layout says.
type QMat struct {
	DType      runtime.DType
	Q          []uint8
	Scale      []float32
	Layout     FP8Layout
	Rows, Cols int
}

// Validate checks the dtype and that Q and Scale have the sizes the shape
// and layout give.
func (m QMat) Validate() error {
	if m.Rows < 0 || m.Cols < 0 {
		return fmt.Errorf("kernels.QMat: negative shape %dx%d", m.Rows, m.Cols)
	}
	if m.DType != runtime.F8E4M3 && m.DType != runtime.F8E5M2 {
		return fmt.Errorf("kernels.QMat: dtype %v, want F8_E4M3 or F8_E5M2", m.DType)
	}
	if len(m.Q) != m.Rows*m.Cols {
		return fmt.Errorf("kernels.QMat: %dx%d has %d values, want %d", m.Rows, m.Cols, len(m.Q), m.Rows*m.Cols)
	}
	if m.Layout.Block < 0 {
		return fmt.Errorf("kernels.QMat: negative block size %d", m.Layout.Block)
	}
	if want := m.Layout.ScaleShape(m.Rows, m.Cols).NumElements(); len(m.Scale) != want {
		return fmt.Errorf("kernels.QMat: %d scales for a %v %dx%d matrix, want %d", len(m.Scale), m.Layout, m.Rows, m.Cols, want)
	}
	return nil
}

// dequantRows writes rows [r0,r1) of the dequantized matrix into
// dst[:(r1-r0)*Cols].
func (m QMat) dequantRows(dst []float32, r0, r1 int) {
	tab := runtime.F8E4M3Table()
	if m.DType == runtime.F8E5M2 {
		tab = runtime.F8E5M2Table()
	}
	k, B := m.Cols, m.Layout.Block
	for r := r0; r < r1; r++ {
		q, d := m.Q[r*k:(r+1)*k], dst[(r-r0)*k:(r-r0+1)*k]
		if B == 0 {
			s := m.Scale[r]
			for c, b := range q {
				d[c] = tab[b] * s
			}
			continue
		}
		srow := m.Scale[(r/B)*((k+B-1)/B):]
		for c0 := 0; c0 < k; c0 += B {
			s := srow[c0/B]
			c1 := min(c0+B, k)
			for c := c0; c < c1; c++ {
				d[c] = tab[q[c]] * s
			}
		}
	}
}

// MatMulQ computes out[i,j] = Σ_k x[i,k]·w[j,k] for the dequantized w
// (float32(q)·scale, one float32 product per element, the way the
// checkpoints' float references dequantize), x [m,k] and out [m,n] float32,
// float32 accumulation. Blocks of w rows are dequantized once into float32
// scratch and reused by every row of x; row i of the result does not
// depend on m or on the number of cores.
func MatMulQ(out, x []float32, m int, w QMat) error {
	if err := w.Validate(); err != nil {
		return fmt.Errorf("kernels.MatMulFP8: w: %w", err)
	}
	n, k := w.Rows, w.Cols
	switch {
	case m < 0:
		return fmt.Errorf("kernels.MatMulFP8: negative m = %d", m)
	case len(x) != m*k:
		return fmt.Errorf("kernels.MatMulFP8: x has %d values, want m*k = %d*%d = %d", len(x), m, k, m*k)
	case len(out) != m*n:
		return fmt.Errorf("kernels.MatMulFP8: out has %d values, want m*n = %d*%d = %d", len(out), m, n, m*n)
	}
	if m == 0 || n == 0 {
		return nil
	}
	if k == 0 {
		clear(out)
		return nil
	}
	bRows := gemmBlockRows(k)
	blocks := (n + bRows - 1) / bRows
	grain := max(1, gemvGrain/(m*bRows*k))
	run := func(b0, b1 int) {
		bp := getF32(bRows * k)
		defer putF32(bp)
		for b := b0; b < b1; b++ {
			j0 := b * bRows
			j1 := min(j0+bRows, n)
			panel := (*bp)[:(j1-j0)*k]
			w.dequantRows(panel, j0, j1)
			gemmPanel(out, x, m, n, k, panel, j0, j1-j0)
		}
	}
	if !splits(blocks, grain) {
		run(0, blocks)
		return nil
	}
	parallelFor(blocks, grain, func(_, lo, hi int) { run(lo, hi) })
	return nil
}

// AsQMat views a CPU FP8 weight and its scales (CheckFP8) as a QMat; the
// scales are widened to float32 (a copy: N or ⌈N/B⌉·⌈D/B⌉ values).
func AsQMat(w, scale *runtime.Tensor, layout FP8Layout) (QMat, error) {
	if err := CheckFP8(w, scale, layout); err != nil {
		return QMat{}, err
	}
	if (w.Bytes() == nil && w.NumElements() > 0) || (scale.Bytes() == nil && scale.NumElements() > 0) {
		return QMat{}, fmt.Errorf("kernels.MatMulFP8: weight %v or scale %v is not in host-addressable memory", w, scale)
	}
	s := make([]float32, scale.NumElements())
	switch scale.DType() {
	case runtime.F32:
		copy(s, scale.F32())
	case runtime.BF16:
		widenBF16(s, scale.U16())
	case runtime.F16:
		widenF16(s, scale.U16())
	}
	return QMat{DType: w.DType(), Q: w.Bytes(), Scale: s, Layout: layout, Rows: w.Dim(0), Cols: w.Dim(1)}, nil
}

// MatMulFP8 is the CPU reference of FP8MatMuler: out[T,N] =
// x[T,D]·dequant(w, scale)ᵀ in float32.
func (b *CPUBackend) MatMulFP8(out, x, w, scale *runtime.Tensor, layout FP8Layout) error {
	qm, err := AsQMat(w, scale, layout)
	if err != nil {
		return err
	}
	xv, err := f32("MatMulFP8 x", x)
	if err != nil {
		return err
	}
	ov, err := f32("MatMulFP8 out", out)
	if err != nil {
		return err
	}
	if qm.Cols == 0 || x.NumElements()%qm.Cols != 0 {
		return fmt.Errorf("kernels.MatMulFP8: x %v does not have rows of w's %d columns (w %v)", x.Shape(), qm.Cols, w.Shape())
	}
	m := x.NumElements() / qm.Cols
	if out.NumElements() != m*qm.Rows {
		return fmt.Errorf("kernels.MatMulFP8: out %v, want %d×%d", out.Shape(), m, qm.Rows)
	}
	if b.FP8Activations {
		xq := make([]float32, len(xv))
		QuantizeRowsF32(xq, xv, qm.Cols)
		xv = xq
	}
	return MatMulQ(ov, xv, m, qm)
}

// QuantizeFP8 quantizes w [n,k] (float32) to E4M3 per output channel, the
// way compressed-tensors does: scale[j] = max|w[j,:]|/448 (a zero row gets
// scale 1), q = round-to-nearest-even(w/scale) clamped to ±448. It returns
// the codes and the scales; w ≈ float32(q)·scale.
func QuantizeFP8(w []float32, n, k int) (q []uint8, scale []float32, err error) {
	if n < 0 || k < 0 || len(w) != n*k {
		return nil, nil, fmt.Errorf("kernels.QuantizeFP8: %d values for %dx%d", len(w), n, k)
	}
	q, scale = make([]uint8, n*k), make([]float32, n)
	for j := range n {
		QuantizeRowFP8(q[j*k:(j+1)*k], w[j*k:(j+1)*k], &scale[j])
	}
	return q, scale, nil
}

// QuantizeRowFP8 quantizes one row: *scale = max|row|/448 (1 for a zero or
// non-finite maximum), dst[c] = E4M3(row[c] / *scale).
func QuantizeRowFP8(dst []uint8, row []float32, scale *float32) {
	var amax float32
	for _, v := range row {
		if v < 0 {
			v = -v
		}
		if v > amax {
			amax = v
		}
	}
	s := amax / runtime.F8E4M3Max
	if !(s > 0) || s > 3e38 {
		s = 1
	}
	*scale = s
	for c, v := range row {
		dst[c] = runtime.F32ToF8E4M3(v / s)
	}
}

// QuantizeMatFP8 quantizes w (F32, BF16 or F16, rows × cols) to E4M3 per
// output channel (QuantizeRowFP8 on each row) into q[rows·cols] and
// scale[rows], rows spread over the cores.
func QuantizeMatFP8(q []uint8, scale []float32, w Mat) error {
	if err := w.Validate(); err != nil {
		return fmt.Errorf("kernels.QuantizeMatFP8: %w", err)
	}
	n, k := w.Rows, w.Cols
	if len(q) != n*k || len(scale) != n {
		return fmt.Errorf("kernels.QuantizeMatFP8: %d codes and %d scales for %dx%d, want %d and %d", len(q), len(scale), n, k, n*k, n)
	}
	if n == 0 || k == 0 {
		for j := range scale {
			scale[j] = 1
		}
		return nil
	}
	run := func(lo, hi int) {
		bp := getF32(k)
		defer putF32(bp)
		row := (*bp)[:k]
		for j := lo; j < hi; j++ {
			w.widenRows(row, j, j+1)
			QuantizeRowFP8(q[j*k:(j+1)*k], row, &scale[j])
		}
	}
	grain := max(1, convGrain/k)
	if !splits(n, grain) {
		run(0, n)
		return nil
	}
	parallelFor(n, grain, func(_, lo, hi int) { run(lo, hi) })
	return nil
}

// QuantizeRowsF32 writes into dst each k-wide row of x rounded through
// E4M3 with the row's own scale (QuantizeRowFP8, then back to float32):
// per-token activation quantization, as an FP8 GEMM would see x.
func QuantizeRowsF32(dst, x []float32, k int) {
	if k <= 0 {
		return
	}
	tab := runtime.F8E4M3Table()
	q := make([]uint8, k)
	for r := 0; r+k <= len(x); r += k {
		var s float32
		QuantizeRowFP8(q, x[r:r+k], &s)
		for c, b := range q {
			dst[r+c] = tab[b] * s
		}
	}
}
