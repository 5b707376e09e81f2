package decoder

import (
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// L2 prefetch on a graph branch (kernels.L2Brancher; FT_L2_BRANCH on the
// CUDA backend). In a one-token forward of one sequence the layer forks a
// prefetch of the next projection's first weight bytes into L2 right after
// the kernel in front of a latency-bound stretch, by the backend's plan:
//
//   - qkv: at the start of the layer (after the previous layer's down
//     projection), the first bytes of q, k and v, beside the input RMSNorm;
//   - o: after the q/k/v projection, o_proj's, beside RoPE and attention;
//   - gu: after the output projection, the first bytes of gate and up (an
//     even share each), beside the post-attention RMSNorm.
//
// The body joins the branch at its end, so the projections that read the
// weights never wait for their prefetch, and the branch never outlives the
// layer. Only for weights that stay resident on the backend's device: no
// hook watches the layer, its attention or MLP or the projections (the
// offload engine watches the units it runs), and the weight is on the
// device. A prefetch changes no value, only where the GEMV finds its bytes.

// l2Branch forks kind's prefetch of ls' weights when b prefetches on a
// branch, T == 1, kind is in its plan and none of ms and ls is watched.
func l2Branch(b kernels.Backend, kind kernels.L2BranchKind, T int, ms []nn.Module, ls ...*nn.Linear) error {
	br, ok := b.(kernels.L2Brancher)
	if !ok || T != 1 {
		return nil
	}
	p := br.L2Branch()
	if !p.Has(kind) {
		return nil
	}
	ts := make([]*runtime.Tensor, 0, len(ls))
	for _, l := range ls {
		if l == nil {
			continue
		}
		ms = append(ms, l)
		ts = append(ts, l.Weight.Tensor())
	}
	if !nn.Unwatched(ms...) {
		return nil
	}
	rs := kernels.PlanL2Regions(b.Device(), p.Cap(kind), kind == kernels.L2BranchGU, ts...)
	if len(rs) == 0 {
		return nil
	}
	return br.ForkL2Prefetch(rs)
}

// branchQKV forks the q/k/v prefetch at the start of a one-sequence layer.
func (l *Layer) branchQKV(b kernels.Backend, T int) error {
	a := l.Attn
	return l2Branch(b, kernels.L2BranchQKV, T, []nn.Module{l, a}, a.Q, a.K, a.V)
}

// branchGU forks the gate·up prefetch after the output projection.
func (l *Layer) branchGU(b kernels.Backend, T int) error {
	if l.MLP == nil {
		return nil
	}
	return l2Branch(b, kernels.L2BranchGU, T, []nn.Module{l, l.MLP}, l.MLP.Gate, l.MLP.Up)
}

// branchO forks the o_proj prefetch after the q/k/v projection (at the
// start of ropeAndAppend).
func (a *Attention) branchO(b kernels.Backend, T int) error {
	if br, ok := b.(kernels.L2Brancher); !ok || T != 1 || !br.L2Branch().Has(kernels.L2BranchO) {
		return nil
	}
	ms := []nn.Module{a}
	if m, ok := a.Node().Tree().Root().(*Model); ok {
		for _, l := range m.Layers {
			if l.Attn == a {
				ms = append(ms, l) // the layer that runs a
			}
		}
	}
	return l2Branch(b, kernels.L2BranchO, T, ms, a.O)
}

// joinL2Branch joins the branch (after the layer's last op; nothing when
// no fork is pending).
func joinL2Branch(b kernels.Backend) error {
	if br, ok := b.(kernels.L2Brancher); ok {
		return br.JoinL2Prefetch()
	}
	return nil
}
