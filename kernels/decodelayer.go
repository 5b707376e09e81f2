package kernels

import (
	"time"

	"github.com/flextensor-go/flextensor/runtime"
)

// DecodeLayer are the operands of one plain pre-norm decoder layer's step
// for one token (Llama's: no biases, no q/k norms, no query scale, dense
// MLP), for a backend that runs the whole layer as one op:
//
//	h = RMSNorm(X)·InNorm; q, k, v = WQ h, WK h, WV h; RoPE(q, k) at Pos;
//	KCache[Pos], VCache[Pos] = k, v; att = attention(q, caches[..Pos]);
//	X += WO att; h = RMSNorm(X)·PostNorm; g = silu(WGate h)·(WUp h);
//	X += WDown g.
//
// H, Q, K, V, Att and Gate are the backend's scratch (the workspace's
// rows); their values afterwards are unspecified.
type DecodeLayer struct {
	X                     *runtime.Tensor // the residual stream [1,D], F32, updated in place
	InNorm, PostNorm      *runtime.Tensor // the two RMSNorm weights [D]
	InEps, PostEps        float32
	WQ, WK, WV, WO        *runtime.Tensor // [H·d,D], [KV·d,D], [KV·d,D], [D,H·d]
	WGate, WUp, WDown     *runtime.Tensor // [I,D], [I,D], [D,I]
	KCache, VCache        *runtime.Tensor // [C,KV,d]
	Pos                   int             // the token's position (the cache row written)
	Window                int             // sliding window (0: none)
	InvFreq               []float32       // the d/2 rotary frequencies
	H, Q, K, V, Att, Gate *runtime.Tensor // scratch: [1,D], [1,H,d], [1,KV,d], [1,KV,d], [1,H,d], [1,I]
	Stages                *DecodeStages   // when set, each stage's wall time is added to it
}

// DecodeStage names one stage of a DecodeLayer step (DecodeStages' index).
type DecodeStage int

// The stages of a DecodeLayer step, in order.
const (
	StageNorm      DecodeStage = iota // RMSNorm of the residual before attention
	StageQKV                          // the fused q/k/v GEMV
	StageRoPEKV                       // RoPE of q and k, and the KV-cache append
	StageAttention                    // attention over the cache
	StageO                            // the o_proj GEMV adding into the residual
	StagePostNorm                     // RMSNorm before the MLP
	StageGateUp                       // the fused gate·up GEMV with SiLU·up
	StageDown                         // the down_proj GEMV adding into the residual
	NumDecodeStages
)

var decodeStageNames = [NumDecodeStages]string{"norm", "q/k/v", "rope+kv", "attention", "o+add", "post-norm", "gate·up·silu", "down+add"}

// String is the stage's name in breakdown tables.
func (s DecodeStage) String() string {
	if s < 0 || s >= NumDecodeStages {
		return "stage?"
	}
	return decodeStageNames[s]
}

// DecodeStages accumulates a DecodeLayer op's wall time per stage over
// Steps steps.
type DecodeStages struct {
	Time  [NumDecodeStages]time.Duration
	Steps int
}

// DecodeLayerer is implemented by backends that run a whole one-token
// decoder layer as one op: the host backend (fewer hand-offs to its worker
// pool, the residual adds in the output GEMVs, RoPE and the cache append
// on the calling thread between jobs) and the CUDA backend with
// FT_DECODE_MEGA=1 (one persistent kernel with grid barriers between its
// phases, kernels/cuda/decodelayer.cu).
type DecodeLayerer interface {
	// DecodeLayer runs a's step, leaving in a.X, a.KCache and a.VCache
	// the values the layer's separate ops give up to summation order.
	// ran false: the backend declines these operands (or has the fused
	// layer switched off) and did nothing.
	DecodeLayer(a DecodeLayer) (ran bool, err error)
	// DecodeLayerOn reports whether the op is switched on. False:
	// DecodeLayer declines whatever it is given, so a caller skips building
	// its operands (the eager decode path asks before every layer).
	DecodeLayerOn() bool
}
