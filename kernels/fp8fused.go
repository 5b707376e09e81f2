package kernels

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// FP8MultiMatMuler is MultiMatMuler for FP8 weights: outs[i][T,N_i] =
// x[T,D]·dequant(ws[i], scales[i])ᵀ, every weight's scales laid out as
// layout says (one launch for a token's q, k and v on the GPU).
type FP8MultiMatMuler interface {
	// MatMulNFP8 computes outs[i] = x·dequant(ws[i], scales[i])ᵀ for every i in one op.
	MatMulNFP8(outs []*runtime.Tensor, x *runtime.Tensor, ws, scales []*runtime.Tensor, layout FP8Layout) error
}

// FP8GateUpSiLUer is GateUpSiLUer for FP8 gate and up weights: out[1,I] =
// silu(x·dequant(wg, sg)ᵀ)·(x·dequant(wu, su)ᵀ) for x of one row. up is
// scratch of out's shape that an unfused path may write.
type FP8GateUpSiLUer interface {
	// GateUpSiLUFP8 computes out = silu(x·dequant(wg)ᵀ)·(x·dequant(wu)ᵀ) for x of one row.
	GateUpSiLUFP8(out, up, x, wg, wu, sg, su *runtime.Tensor, layout FP8Layout) error
}

var (
	_ FP8MultiMatMuler = (*CPUBackend)(nil)
	_ FP8GateUpSiLUer  = (*CPUBackend)(nil)
)

// MatMulNFP8 is FP8MultiMatMuler on the CPU: one MatMulFP8 per weight.
func (b *CPUBackend) MatMulNFP8(outs []*runtime.Tensor, x *runtime.Tensor, ws, scales []*runtime.Tensor, layout FP8Layout) error {
	return MatMulNFP8Each(b, outs, x, ws, scales, layout)
}

// GateUpSiLUFP8 is FP8GateUpSiLUer on the CPU: gate into out, up into up,
// then SiLUMul.
func (b *CPUBackend) GateUpSiLUFP8(out, up, x, wg, wu, sg, su *runtime.Tensor, layout FP8Layout) error {
	return GateUpSiLUFP8Apart(b, out, up, x, wg, wu, sg, su, layout)
}

// FP8Products is what the fused FP8 ops are made of when a backend runs
// them as separate ops: its FP8 product and SiLUMul.
type FP8Products interface {
	FP8MatMuler
	SiLUMul(out, gate, up *runtime.Tensor) error
}

// MatMulNFP8Each is MatMulNFP8 by b's MatMulFP8, one product a weight: the
// fused op of a backend without a fused kernel. A backend embedding
// another passes itself, so that its own products run.
func MatMulNFP8Each(b FP8MatMuler, outs []*runtime.Tensor, x *runtime.Tensor, ws, scales []*runtime.Tensor, layout FP8Layout) error {
	if len(outs) != len(ws) || len(scales) != len(ws) {
		return fmt.Errorf("kernels.MatMulNFP8: %d outputs and %d scales for %d weights", len(outs), len(scales), len(ws))
	}
	for i := range ws {
		if err := b.MatMulFP8(outs[i], x, ws[i], scales[i], layout); err != nil {
			return err
		}
	}
	return nil
}

// GateUpSiLUFP8Apart is GateUpSiLUFP8 by b's separate ops: gate into out,
// up into up, then SiLUMul.
func GateUpSiLUFP8Apart(b FP8Products, out, up, x, wg, wu, sg, su *runtime.Tensor, layout FP8Layout) error {
	if err := b.MatMulFP8(out, x, wg, sg, layout); err != nil {
		return err
	}
	if err := b.MatMulFP8(up, x, wu, su, layout); err != nil {
		return err
	}
	return b.SiLUMul(out, out, up)
}
