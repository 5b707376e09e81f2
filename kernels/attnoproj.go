package kernels

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// AttnOProjer is implemented by backends that can run one token's decode
// attention and the residual-accumulating output projection after it as
// one op (issue 21: the CUDA backend streams the o_proj weights while the
// latency-bound attention computes, kernels/cuda/attnoproj.cu, behind
// FT_ATTN_OPROJ).
type AttnOProjer interface {
	// AttnOProj sets y[1,N] += att·woᵀ with att[1,H,d] the causal GQA
	// attention of q[1,H,d] at position pos0 over the caches' rows
	// 0..pos0 (kCache, vCache [C,K,d]; Attention's values, rounded to the
	// activation dtype), y F32, wo [N,H·d] with no bias. The attention's
	// output itself is not written. It reports whether it ran: false
	// (nothing enqueued, no error) where the backend does not fuse these
	// operands (a switch, a head width, the context length), and the
	// caller then runs Attention and MatMulAdd.
	AttnOProj(y, q, kCache, vCache, wo *runtime.Tensor, pos0 int) (bool, error)
}

// AttnOProj sets y += Attention(q, kCache, vCache at pos0)·woᵀ (see
// AttnOProjer) on b: in one op where b is an AttnOProjer that takes the
// operands, else as Attention into att ([1,H,d], the activation dtype)
// and MatMulAdd (tmp: the reference's F32 scratch of y's size, unused on a
// MatMulAdder). The second return says whether the fused op ran.
func AttnOProj(b Backend, y, att, q, kCache, vCache, wo, tmp *runtime.Tensor, pos0 int) (bool, error) {
	if y == nil || att == nil || q == nil || kCache == nil || vCache == nil || wo == nil {
		return false, fmt.Errorf("kernels.AttnOProj: a nil tensor (y %v, att %v, q %v, k cache %v, v cache %v, wo %v)",
			y != nil, att != nil, q != nil, kCache != nil, vCache != nil, wo != nil)
	}
	if f, ok := b.(AttnOProjer); ok {
		ran, err := f.AttnOProj(y, q, kCache, vCache, wo, pos0)
		if err != nil || ran {
			return ran, err
		}
	}
	if err := b.Attention(att, q, kCache, vCache, pos0); err != nil {
		return false, err
	}
	T := max(1, att.Dim(0))
	flat, err := att.Reshape(T, att.NumElements()/T)
	if err != nil {
		return false, fmt.Errorf("kernels.AttnOProj: %w", err)
	}
	return false, MatMulAdd(b, y, flat, wo, tmp)
}
