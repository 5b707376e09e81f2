package kernels

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// FP8MLP is a gated MLP's FP8 weights: Gate and Up [I,D], Down [D,I], each
// with its scales laid out as Layout says (see CheckFP8).
type FP8MLP struct {
	Gate, Up, Down                *runtime.Tensor
	GateScale, UpScale, DownScale *runtime.Tensor
	Layout                        FP8Layout
}

// FP8MLPer is implemented by a backend that runs a whole FP8 MLP over
// several rows (a prefill) as one op, keeping the SiLU·up intermediate
// quantized on the device: on the GPU the gate and up GEMMs write their
// unscaled products, one kernel applies the token and channel scales,
// computes silu(gate)·up in fp32 and quantizes each row to E4M3 for the
// down GEMM (no rescale pass of gate and up, no SiLU pass, no separate
// quantization of the down projection's input, no BF16 intermediate), and
// the down GEMM's rescale writes the output or adds it into the residual
// stream. Backends without it (the CPU ones) run gate, up, SiLUMul and
// down, the reference.
type FP8MLPer interface {
	// FusesFP8MLP reports whether MLPFP8 takes rows tokens of weights in
	// this layout (the GPU: per-channel scales and a prefill that takes
	// the FP8 tensor cores, unless FT_FP8_FUSE=0). Callers run the unfused
	// ops where it does not.
	FusesFP8MLP(rows int, layout FP8Layout) bool
	// MLPFP8 sets y[T,D] = down(silu(gate(x))·up(x)) for x[T,D], or, with
	// add, y += that (y F32: the residual stream). g and u are scratch
	// [T,I] in the activation dtype; tmp is F32 scratch of y's shape, used
	// with add (the down product before it is added), else unused and may
	// be nil. Where a shape does not allow the fused path the backend runs
	// the unfused ops itself: the call always computes the MLP.
	MLPFP8(y, x, g, u, tmp *runtime.Tensor, m FP8MLP, add bool) error
}

// SiLUQuantRowsFP8 is the reference of the fused FP8 MLP's middle step
// (fp8_silu_quant_rows on the GPU), in its order of rounding. g and u hold
// T rows of I unscaled gate and up products (Σ codes·codes, as the FP8
// GEMMs leave them; the GPU rounds them to BF16), xs the T token scales of
// the quantized input, sg and su the I channel scales of gate and up. For
// each element, in float32:
//
//	a  = xs[t]·sg[c],  b = xs[t]·su[c]
//	h  = silu(g·a)·(u·b),  silu(z) = z/(1+e^−z)
//
// then each row of h is quantized as QuantizeRowFP8 does (scale
// max|h|/448, codes E4M3 of h/scale, round to nearest even) into q[T·I]
// and hs[T]. The unfused path instead rounds the rescaled gate and up to
// BF16, and silu·up again to BF16, before quantizing; this one rounds
// nothing between the GEMMs' outputs and the E4M3 codes, which is the
// order of the CPU's W8A8 emulation (float32 gate and up, SiLUMul in
// float32, QuantizeRowsF32 of the down projection's input).
func SiLUQuantRowsFP8(q []uint8, hs, g, u, xs, sg, su []float32, I int) error {
	if I <= 0 || len(g)%I != 0 {
		return fmt.Errorf("kernels.SiLUQuantRowsFP8: %d gate values are not rows of I = %d", len(g), I)
	}
	T := len(g) / I
	switch {
	case len(u) != len(g) || len(q) != len(g):
		return fmt.Errorf("kernels.SiLUQuantRowsFP8: gate %d, up %d and codes %d values, want equal", len(g), len(u), len(q))
	case len(xs) != T || len(hs) != T:
		return fmt.Errorf("kernels.SiLUQuantRowsFP8: %d token scales in, %d out, want T = %d", len(xs), len(hs), T)
	case len(sg) != I || len(su) != I:
		return fmt.Errorf("kernels.SiLUQuantRowsFP8: %d gate and %d up channel scales, want I = %d", len(sg), len(su), I)
	}
	gr, ur, h := make([]float32, I), make([]float32, I), make([]float32, I)
	for t := range T {
		a := xs[t]
		for c := range I {
			gr[c] = g[t*I+c] * (a * sg[c])
			ur[c] = u[t*I+c] * (a * su[c])
		}
		siluMul(h, gr, ur)
		QuantizeRowFP8(q[t*I:(t+1)*I], h, &hs[t])
	}
	return nil
}
