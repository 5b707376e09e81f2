package decoder

import (
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// Fusion is decided per module: a module runs its children's ops as one
// fused op (which skips the children's nn.Call) when the backend has the
// fused op and no installed hook watches those children (nn.Unwatched). The
// offload engine watches only the root and its units, so the layers it
// streams still fuse their projections.

// plain reports whether no Linear of ls is quantized: the fused ops of
// plain weights (MultiMatMuler, GateUpSiLUer) take only those.
func plain(ls ...*nn.Linear) bool {
	for _, l := range ls {
		if l.Scale != nil {
			return false
		}
	}
	return true
}

// allFP8 reports whether every Linear of ls is FP8 with one scale layout
// (the fused FP8 ops, FP8MultiMatMuler and FP8GateUpSiLUer, take those).
func allFP8(ls ...*nn.Linear) bool {
	for _, l := range ls {
		if l.Scale == nil || l.FP8 != ls[0].FP8 {
			return false
		}
	}
	return true
}

// fp8Rows reports whether the fused FP8 ops take h's rows: one token, or
// several where the backend gains from it (kernels.FusesFP8Rows: the GPU
// quantizes the shared activations once), the Linears unwatched.
func fp8Rows(b kernels.Backend, h *runtime.Tensor, ls ...*nn.Linear) bool {
	ms := make([]nn.Module, len(ls))
	for i, l := range ls {
		ms[i] = l
	}
	return nn.Unwatched(ms...) && kernels.FusesFP8Rows(b, h.Dim(0))
}

// fp8Parts are the weights and scales of FP8 Linears.
func fp8Parts(ls ...*nn.Linear) (ws, scales []*runtime.Tensor) {
	for _, l := range ls {
		ws = append(ws, l.Weight.Tensor())
		scales = append(scales, l.Scale.Tensor())
	}
	return ws, scales
}

// project computes q, k and v from the input in (h[T,D], or the residual
// and its pending norm: normfuse.go): with the norm folded in where the
// backend takes it (kernels.NormProjector); for one token in one op where
// the backend fuses them (kernels.MultiMatMuler for plain weights,
// kernels.FP8MultiMatMuler for FP8 ones; the biases, if any, are added
// after it); for 2..MergedMaxTokens tokens (or more: merges) of plain
// weights as one GEMM where the backend merges them (kernels.MergedMatMuler: the weights lie
// back to back, merged.go); else as three Linear forwards.
func (a *Attention) project(b kernels.Backend, in normed, q, k, v *runtime.Tensor) error {
	if in.norm != nil {
		var ran bool
		var err error
		if allFP8(a.Q, a.K, a.V) {
			ws, scales := fp8Parts(a.Q, a.K, a.V)
			ran, err = b.(kernels.FP8NormProjector).NormMatMulNFP8([]*runtime.Tensor{q, k, v}, in.x, in.norm.Weight.Tensor(), in.norm.Eps,
				ws, scales, a.Q.FP8)
		} else {
			ran, err = b.(kernels.NormProjector).NormMatMulN([]*runtime.Tensor{q, k, v}, in.x, in.norm.Weight.Tensor(), in.norm.Eps,
				weights(a.Q, a.K, a.V))
		}
		if err != nil {
			return err
		}
		if ran {
			return a.addBiases(b, q, k, v)
		}
	}
	h, err := in.ready(b)
	if err != nil {
		return err
	}
	one := h.Dim(0) == 1 && nn.Unwatched(a.Q, a.K, a.V)
	fused := true
	if f, ok := b.(kernels.MultiMatMuler); ok && one && plain(a.Q, a.K, a.V) {
		err = f.MatMulN([]*runtime.Tensor{q, k, v}, h,
			[]*runtime.Tensor{a.Q.Weight.Tensor(), a.K.Weight.Tensor(), a.V.Weight.Tensor()})
	} else if f, ok := b.(kernels.FP8MultiMatMuler); ok && fp8Rows(b, h, a.Q, a.K, a.V) && allFP8(a.Q, a.K, a.V) {
		ws, scales := fp8Parts(a.Q, a.K, a.V)
		err = f.MatMulNFP8([]*runtime.Tensor{q, k, v}, h, ws, scales, a.Q.FP8)
	} else if f, ok := b.(kernels.MergedMatMuler); ok && merges(b, h, false, a.Q, a.K, a.V) {
		var ran bool
		ran, err = f.MatMulMerged([]*runtime.Tensor{q, k, v}, h,
			[]*runtime.Tensor{a.Q.Weight.Tensor(), a.K.Weight.Tensor(), a.V.Weight.Tensor()})
		fused = ran || err != nil
		if err == nil {
			noteMerged(a, ran)
		}
	} else {
		fused = false
	}
	if fused {
		if err != nil {
			return err
		}
		return a.addBiases(b, q, k, v)
	}
	if err := a.Q.Forward(b, q, h); err != nil {
		return err
	}
	if err := a.K.Forward(b, k, h); err != nil {
		return err
	}
	return a.V.Forward(b, v, h)
}

// addBiases adds the q, k and v biases, where there are any, after a fused
// projection.
func (a *Attention) addBiases(b kernels.Backend, q, k, v *runtime.Tensor) error {
	for _, p := range []struct {
		l   *nn.Linear
		out *runtime.Tensor
	}{{a.Q, q}, {a.K, k}, {a.V, v}} {
		if err := p.l.AddBias(b, p.out); err != nil {
			return err
		}
	}
	return nil
}

// gateUp leaves silu(gate(h))·up(h) in g (u is scratch) for the input in
// (h, or the residual and its pending norm: normfuse.go): with the norm
// folded in where the backend takes it (kernels.NormProjector); for one
// token in one op where the backend fuses it (kernels.GateUpSiLUer for
// plain weights, kernels.FP8GateUpSiLUer for FP8 ones); for several
// tokens as one GEMM with silu·mul in its epilogue where the backend has
// it (kernels.FusedGateUpSiLUer); for
// 2..MergedMaxTokens tokens (or more: merges) of plain weights as one GEMM and a silu·mul
// where the backend merges them (kernels.MergedGateUpSiLUer: the weights
// lie back to back); else gate, up, SiLUMul.
func (p *MLP) gateUp(b kernels.Backend, g, u *runtime.Tensor, in normed) error {
	if in.norm != nil {
		var ran bool
		var err error
		if allFP8(p.Gate, p.Up) {
			ran, err = b.(kernels.FP8NormProjector).NormGateUpSiLUFP8(g, in.x, in.norm.Weight.Tensor(), in.norm.Eps,
				p.Gate.Weight.Tensor(), p.Up.Weight.Tensor(), p.Gate.Scale.Tensor(), p.Up.Scale.Tensor(), p.Gate.FP8)
		} else {
			ran, err = b.(kernels.NormProjector).NormGateUpSiLU(g, in.x, in.norm.Weight.Tensor(), in.norm.Eps, p.Gate.Weight.Tensor(), p.Up.Weight.Tensor())
		}
		if err != nil || ran {
			return err
		}
	}
	h, err := in.ready(b)
	if err != nil {
		return err
	}
	one := h.Dim(0) == 1 && nn.Unwatched(p.Gate, p.Up)
	if f, ok := b.(kernels.GateUpSiLUer); ok && one && plain(p.Gate, p.Up) {
		return f.GateUpSiLU(g, h, p.Gate.Weight.Tensor(), p.Up.Weight.Tensor())
	}
	if f, ok := b.(kernels.FP8GateUpSiLUer); ok && fp8Rows(b, h, p.Gate, p.Up) && allFP8(p.Gate, p.Up) {
		return f.GateUpSiLUFP8(g, u, h, p.Gate.Weight.Tensor(), p.Up.Weight.Tensor(), p.Gate.Scale.Tensor(), p.Up.Scale.Tensor(), p.Gate.FP8)
	}
	if f, ok := b.(kernels.FusedGateUpSiLUer); ok && h.Dim(0) > 1 && plain(p.Gate, p.Up) && nn.Unwatched(p.Gate, p.Up) {
		ran, err := f.GateUpSiLUFused(g, h, p.Gate.Weight.Tensor(), p.Up.Weight.Tensor())
		if err != nil || ran {
			return err
		}
	}
	if f, ok := b.(kernels.MergedGateUpSiLUer); ok && merges(b, h, true, p.Gate, p.Up) {
		ran, err := f.GateUpSiLUMerged(g, h, p.Gate.Weight.Tensor(), p.Up.Weight.Tensor())
		if err != nil {
			return err
		}
		noteMerged(p, ran)
		if ran {
			return nil
		}
	}
	if err := p.Gate.Forward(b, g, h); err != nil {
		return err
	}
	if err := p.Up.Forward(b, u, h); err != nil {
		return err
	}
	return b.SiLUMul(g, g, u)
}

// ropeAndAppend rotates q and k and appends k and v to the cache: one fused
// op where the backend has it (kernels.RoPEStorer) and the cache is Direct,
// else RoPE of q and k (kernels.RoPEQK) and the cache's Append.
func (a *Attention) ropeAndAppend(b kernels.Backend, invFreq []float32, q, k, v *runtime.Tensor, cache Cache) error {
	pos0 := cache.Len()
	if f, ok := b.(kernels.RoPEStorer); ok {
		if _, direct := cache.(Direct); direct {
			kc, vc := cache.View(a.Layer)
			return f.RoPEStoreKV(q, k, v, kc, vc, pos0, invFreq)
		}
	}
	if err := kernels.RoPEQK(b, q, k, pos0, invFreq); err != nil {
		return err
	}
	return cache.Append(b, a.Layer, k, v)
}

// addPostNorm sets x += o and h = PostNorm(x): one op where the backend
// fuses them (kernels.AddRMSNormer) and no hook watches the norm, else Add
// and the norm's forward.
func (l *Layer) addPostNorm(b kernels.Backend, h, x, o *runtime.Tensor) error {
	if f, ok := b.(kernels.AddRMSNormer); ok && nn.Unwatched(l.PostNorm) {
		return f.AddRMSNorm(h, x, o, l.PostNorm.Weight.Tensor(), l.PostNorm.Eps)
	}
	if err := b.Add(x, x, o); err != nil {
		return err
	}
	return l.PostNorm.Forward(b, h, x)
}
