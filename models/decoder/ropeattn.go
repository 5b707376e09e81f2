package decoder

import (
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// attendRoPE is the attention input and the attention of one token with
// RoPE and the KV store folded into the attention op
// (kernels.RoPEAttender, switched on: the CUDA backend's FT_ROPE_ATTN=1):
// project and qkNorm as usual (q/k norms come before the rotation), then
// one AttendRoPE writing att and the cache row; where the backend declines
// the operands, ropeAndAppend and the attention op instead. It applies to
// a one-token forward over a Direct cache without a query scale (QScale
// multiplies the rotated queries, which the fused op never writes); ran
// false: it did nothing, and forward takes its usual path.
func (a *Attention) attendRoPE(b kernels.Backend, invFreq []float32, in normed, q, k, v, att *runtime.Tensor, cache Cache) (ran bool, err error) {
	f, ok := b.(kernels.RoPEAttender)
	if !ok || in.h.Dim(0) != 1 || a.QScale != 0 || !f.RoPEAttends() {
		return false, nil
	}
	if _, direct := cache.(Direct); !direct {
		return false, nil
	}
	if err := a.project(b, in, q, k, v); err != nil {
		return true, err
	}
	if err := a.qkNorm(b, q, k); err != nil {
		return true, err
	}
	kc, vc := cache.View(a.Layer)
	pos := cache.Len()
	fused, err := f.AttendRoPE(kernels.RoPEAttention{Out: att, Q: q, K: k, V: v, KCache: kc, VCache: vc, Pos: pos, Window: a.Window, InvFreq: invFreq})
	if err != nil || fused {
		return true, err
	}
	if err := a.ropeAndAppend(b, invFreq, q, k, v, cache); err != nil {
		return true, err
	}
	return true, kernels.AttendWindow(b, att, q, kc, vc, pos, a.Window)
}
