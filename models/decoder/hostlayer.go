package decoder

import (
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// One-token layers as one backend op (kernels.DecodeLayerer): the host
// backend runs a plain layer's decode step as five worker-pool jobs with
// the norms, RoPE, the cache append and the residual adds folded in
// between or into them, where the separate ops cost a dozen calls, two
// extra passes over the residual and the reference kernels' own dispatch;
// the CUDA backend, with FT_DECODE_MEGA=1, as one persistent kernel (the
// eager step and the graphs captured from it, unitgraph.go included).
// Layers with anything the op does not cover (biases, q/k norms, a query
// scale, quantized or scaled weights, experts, hooks on the layer's
// parts, tensor parallelism) run the separate ops.

// decodeLayer runs l's one-token step through b's DecodeLayer when b has
// one switched on and the layer is plain (asked in that order, so that a
// backend with the op off costs no operand building); ran false: it did
// nothing. stages, when set,
// accumulates the op's per-stage times.
func (l *Layer) decodeLayer(b kernels.Backend, w *workspace, x *runtime.Tensor, cache Cache, stages *kernels.DecodeStages) (bool, error) {
	f, ok := b.(kernels.DecodeLayerer)
	if !ok || x.Dim(0) != 1 || !f.DecodeLayerOn() || !l.plainDecode() {
		return false, nil
	}
	kc, vc, ok, err := directKV(cache, l.Attn.Layer)
	if err != nil || !ok {
		return false, err
	}
	m := l.Node().Tree().Root().(*Model)
	a := l.Attn
	one := w.oneRow()
	ran, err := f.DecodeLayer(kernels.DecodeLayer{
		X: x, InNorm: l.InputNorm.Weight.Tensor(), PostNorm: l.PostNorm.Weight.Tensor(),
		InEps: l.InputNorm.Eps, PostEps: l.PostNorm.Eps,
		WQ: a.Q.Weight.Tensor(), WK: a.K.Weight.Tensor(), WV: a.V.Weight.Tensor(), WO: a.O.Weight.Tensor(),
		WGate: l.MLP.Gate.Weight.Tensor(), WUp: l.MLP.Up.Weight.Tensor(), WDown: l.MLP.Down.Weight.Tensor(),
		KCache: kc, VCache: vc, Pos: cache.Len(), Window: a.Window, InvFreq: m.invFreq,
		H: one.h, Q: one.q, K: one.k, V: one.v, Att: one.att, Gate: one.gate,
		Stages: stages,
	})
	if ran {
		w.normed = tailNormed{} // x changed: no norm of it is pending
	}
	return ran, err
}

// plainDecode reports whether l is a layer kernels.DecodeLayer describes:
// dense MLP, no biases, no q/k norms, no query scale, plain weights, no
// hook on its parts, not a tensor-parallel shard.
func (l *Layer) plainDecode() bool {
	a, p := l.Attn, l.MLP
	if a == nil || p == nil || l.MoE != nil || a.QNorm != nil || a.KNorm != nil || a.QScale != 0 ||
		l.InputNorm == nil || l.PostNorm == nil {
		return false
	}
	if m, ok := l.Node().Tree().Root().(*Model); !ok || m.tp != nil || len(m.invFreq) == 0 {
		return false
	}
	lin := []*nn.Linear{a.Q, a.K, a.V, a.O, p.Gate, p.Up, p.Down}
	for _, li := range lin {
		if li == nil || li.Bias != nil {
			return false
		}
	}
	if !plain(lin...) {
		return false
	}
	return nn.Unwatched(a, p, a.Q, a.K, a.V, a.O, p.Gate, p.Up, p.Down, l.InputNorm, l.PostNorm)
}

// directKV returns layer's cache storage where the op may write the new
// position itself: a Direct cache's view, or the host side of a KVCache
// (its storage made at the layer's first use, as Append would).
func directKV(cache Cache, layer int) (k, v *runtime.Tensor, ok bool, err error) {
	switch c := cache.(type) {
	case *hostKV:
		if err := c.ensure(layer); err != nil {
			return nil, nil, false, err
		}
		k, v = c.View(layer)
		return k, v, true, nil
	case Direct:
		k, v = c.View(layer)
		return k, v, true, nil
	}
	return nil, nil, false, nil
}

// oneRow is a workspace's one-token views of its activations: made once,
// so that a decode step's layers take no new tensors.
type oneRow struct{ h, q, k, v, att, gate *runtime.Tensor }

// oneRow returns w's one-token views, making them at the first call.
func (w *workspace) oneRow() *oneRow {
	if w.one == nil {
		w.one = &oneRow{h: rows(w.h, 1), q: rows(w.q, 1), k: rows(w.k, 1), v: rows(w.v, 1), att: rows(w.att, 1), gate: rows(w.gate, 1)}
	}
	return w.one
}
