package decoder

import (
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
)

// L2 prefetch inside the latency-bound kernels (kernels.L2Aheader,
// FT_L2_AHEAD on the CUDA backend): for one token of one sequence, the
// layer hands the op in front of each projection the start of that
// projection's weights, which its kernel asks L2 for as it starts:
//
//   - the RMSNorm in front of q/k/v: the first QKV bytes of the q, k, v
//     stack (in that order, two regions at most);
//   - decode attention: the first O bytes of o_proj;
//   - the RMSNorm in front of gate·up: the first MLP/2 bytes of each.
//
// Only for weights resident on the backend's device and with no hook
// watching the layer, its attention or MLP, or the projection (as
// l2prefetch.go). A prefetch changes no value.

// aheader is b's L2Aheader when it prefetches (a nonzero budget) for a
// T-token forward of one sequence over modules ms: T == 1, none watched.
func aheader(b kernels.Backend, T int, ms ...nn.Module) (kernels.L2Aheader, kernels.L2AheadBudget) {
	a, ok := b.(kernels.L2Aheader)
	if !ok || T != 1 {
		return nil, kernels.L2AheadBudget{}
	}
	bud := a.L2AheadBudget()
	if bud == (kernels.L2AheadBudget{}) || !nn.Unwatched(ms...) {
		return nil, kernels.L2AheadBudget{}
	}
	return a, bud
}

// prefixRegions are up to budget bytes of ls' weights in order (each
// rounded down to whole 128-byte lines), at most two regions, ending at a
// weight not on b's device.
func prefixRegions(b kernels.Backend, budget int64, ls ...*nn.Linear) []kernels.L2Region {
	var rs []kernels.L2Region
	for _, l := range ls {
		if budget < 128 || len(rs) == 2 {
			break
		}
		w := l.Weight.Tensor()
		if w == nil || w.Device() != b.Device() {
			break
		}
		n := min(budget, w.NumBytes()) &^ 127
		rs = append(rs, kernels.L2Region{T: w, Bytes: n})
		budget -= n
	}
	return rs
}

// withAhead runs op with a's ahead region set to rs (none: op alone) and
// clears it after, whether op fails or not.
func withAhead(a kernels.L2Aheader, rs []kernels.L2Region, op func() error) error {
	if a == nil || len(rs) == 0 {
		return op()
	}
	if err := a.SetL2Ahead(rs...); err != nil {
		return err
	}
	err := op()
	if cerr := a.SetL2Ahead(); err == nil {
		err = cerr
	}
	return err
}

// aheadQKV is the region the input norm of l prefetches.
func (l *Layer) aheadQKV(b kernels.Backend, T int) (kernels.L2Aheader, []kernels.L2Region) {
	at := l.Attn
	a, bud := aheader(b, T, l, at, at.Q, at.K, at.V)
	if a == nil || bud.QKV == 0 {
		return nil, nil
	}
	return a, prefixRegions(b, bud.QKV, at.Q, at.K, at.V)
}

// aheadMLP is the region the post-attention norm of l prefetches: the
// first half-budget of gate and of up (gemv_gateup_silu reads row r of
// both together). Only for a gated MLP with both projections.
func (l *Layer) aheadMLP(b kernels.Backend, T int) (kernels.L2Aheader, []kernels.L2Region) {
	m := l.MLP
	if m == nil || m.Gate == nil || m.Up == nil {
		return nil, nil
	}
	a, bud := aheader(b, T, l, m, m.Gate, m.Up)
	if a == nil || bud.MLP == 0 {
		return nil, nil
	}
	g := prefixRegions(b, bud.MLP/2, m.Gate)
	u := prefixRegions(b, bud.MLP/2, m.Up)
	if len(g) == 0 || len(u) == 0 {
		return nil, nil
	}
	return a, append(g, u...)
}

// aheadO is the region decode attention prefetches: o_proj's first bytes.
func (at *Attention) aheadO(b kernels.Backend, T int) (kernels.L2Aheader, []kernels.L2Region) {
	ms := []nn.Module{at, at.O}
	if m, ok := at.Node().Tree().Root().(*Model); ok {
		for _, l := range m.Layers {
			if l.Attn == at {
				ms = append(ms, l) // the layer that runs at
			}
		}
	}
	a, bud := aheader(b, T, ms...)
	if a == nil || bud.O == 0 {
		return nil, nil
	}
	return a, prefixRegions(b, bud.O, at.O)
}
