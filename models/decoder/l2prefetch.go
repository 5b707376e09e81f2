package decoder

import (
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
)

// L2 prefetch of weights (kernels.L2Prefetcher): in a one-token step the
// kernels between two projections (RoPE and the KV store, decode attention,
// RMSNorm) are latency-bound and leave HBM nearly idle. Where the backend
// prefetches (its plan, FT_L2_PREFETCH on the CUDA backend), the layer asks
// L2 for the next projection's weights in front of them:
//
//   - plan "o" and "all": o_proj's weight (up to l2PrefetchOBytes of it),
//     after the q/k/v projection, ahead of RoPE and attention;
//   - plan "all": also the first l2PrefetchQKVBytes of the q, k and v
//     weights (in that order), at the start of the layer, ahead of the
//     RMSNorm in front of them.
//
// Only for one-token forwards of one sequence (batched steps are heavier
// in compute and leave HBM less idle), and only for weights that stay
// resident on the backend's device: no installed hook watches the layer,
// its attention or the projection (the offload engine watches the units it
// runs, streamed or not), and the weight is on the backend's device. A
// prefetch changes no value, only where the projection finds its weights.

const (
	// l2PrefetchOBytes caps o_proj's prefetch (Llama-3-8B's is 32 MiB, the
	// H200's L2 about 50 MiB).
	l2PrefetchOBytes = 32 << 20
	// l2PrefetchQKVBytes is what "all" prefetches of q, k and v together,
	// leaving room in L2 for what the norm and the GEMV's other reads bring.
	l2PrefetchQKVBytes = 16 << 20
)

// l2Prefetcher is b's L2Prefetcher when its plan is at least want and a
// T-token forward of one sequence over modules ms (the layer, its
// attention, the projections) prefetches: T == 1 and none of ms watched.
func l2Prefetcher(b kernels.Backend, want kernels.L2PrefetchPlan, T int, ms ...nn.Module) kernels.L2Prefetcher {
	p, ok := b.(kernels.L2Prefetcher)
	if !ok || T != 1 || p.L2Prefetch() < want || !nn.Unwatched(ms...) {
		return nil
	}
	return p
}

// prefetchLinears asks p for up to budget bytes of ls' weights, in order,
// skipping (and ending at) a weight that is not on b's device.
func prefetchLinears(b kernels.Backend, p kernels.L2Prefetcher, budget int64, ls ...*nn.Linear) error {
	for _, l := range ls {
		if budget <= 0 {
			return nil
		}
		w := l.Weight.Tensor()
		if w == nil || w.Device() != b.Device() {
			return nil
		}
		n := min(budget, w.NumBytes())
		if err := p.PrefetchL2(w, n); err != nil {
			return err
		}
		budget -= n
	}
	return nil
}

// prefetchO prefetches o_proj's weight for a T-token forward of one
// sequence (after the q/k/v projection).
func (a *Attention) prefetchO(b kernels.Backend, T int) error {
	if _, ok := b.(kernels.L2Prefetcher); !ok || T != 1 {
		return nil
	}
	ms := []nn.Module{a, a.O}
	if m, ok := a.Node().Tree().Root().(*Model); ok {
		for _, l := range m.Layers {
			if l.Attn == a {
				ms = append(ms, l) // the layer that runs a
			}
		}
	}
	p := l2Prefetcher(b, kernels.L2PrefetchO, T, ms...)
	if p == nil {
		return nil
	}
	return prefetchLinears(b, p, l2PrefetchOBytes, a.O)
}

// prefetchQKV prefetches the first part of the q, k and v weights for a
// T-token forward of one sequence (at the start of the layer, before its
// input norm).
func (l *Layer) prefetchQKV(b kernels.Backend, T int) error {
	a := l.Attn
	p := l2Prefetcher(b, kernels.L2PrefetchAll, T, l, a, a.Q, a.K, a.V)
	if p == nil {
		return nil
	}
	return prefetchLinears(b, p, l2PrefetchQKVBytes, a.Q, a.K, a.V)
}
