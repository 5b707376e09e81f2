package decoder

import (
	"errors"
	"fmt"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// workspace holds the activations of one forward of up to cap tokens.
type workspace struct {
	cap, logitCap         int
	act                   runtime.DType
	x, h, q, k, v, att, o *runtime.Tensor // [cap, …]
	gate, up, logits      *runtime.Tensor
	sel                   *runtime.Tensor // [logitCap, D]: the rows whose logits a batched forward returns
	xLast                 *runtime.Tensor // [logitCap, D] F32: those rows of the residual stream past the last layer's attention (lastrows.go)
	moe                   *moeScratch     // the expert blocks' activations (moe.go), made at the first sparse forward
	bufs                  []*runtime.DeviceBuffer
	onHost                bool    // the host-placed layers' workspace (hostrun.go)
	one                   *oneRow // one-token views for decodeLayer (hostlayer.go), made at first use
	normed                tailNormed
	// last: set while a forward's last layer runs on this workspace where
	// it goes on past attention with some rows only (lastrows.go).
	last *lastRows
}

func (w *workspace) free() {
	for _, b := range w.bufs {
		b.Free()
	}
	w.bufs = nil
}

// workspaceFor returns activations for n tokens with logits for logitRows
// of them (1 unless all positions' logits are asked for: a long prefill's
// logits alone would be n × vocabulary floats).
func (m *Model) workspaceFor(b kernels.Backend, n, logitRows int) (*workspace, error) {
	if m.ws != nil && m.ws.cap >= n && m.ws.logitCap >= logitRows && m.ws.act == b.ActDType() && m.ws.x.Device() == b.Device() {
		return m.ws, nil
	}
	if m.ws != nil {
		n, logitRows = max(n, m.ws.cap), max(logitRows, m.ws.logitCap)
	}
	if m.ws != nil {
		m.ws.free()
		m.ws = nil
	}
	w, err := m.allocWorkspace(b, n, logitRows)
	if err != nil {
		return nil, err
	}
	m.ws = w
	return w, nil
}

// allocWorkspace allocates activations for n tokens on b's device.
func (m *Model) allocWorkspace(b kernels.Backend, n, logitRows int) (*workspace, error) {
	c := m.Cfg
	w := &workspace{cap: n, logitCap: logitRows, act: b.ActDType()}
	allocAs := func(dt runtime.DType, label string, shape ...int) *runtime.Tensor {
		t, err := runtime.NewTensor(b.Device(), dt, shape, "activations "+label)
		if err != nil {
			panic(err)
		}
		w.bufs = append(w.bufs, t.Buffer())
		return t
	}
	alloc := func(label string, shape ...int) *runtime.Tensor { return allocAs(b.ActDType(), label, shape...) }
	allocF32 := func(label string, shape ...int) *runtime.Tensor { return allocAs(runtime.F32, label, shape...) }
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				if e, ok := r.(error); ok {
					err = e
					return
				}
				panic(r)
			}
		}()
		H, K, d := c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim
		w.x = allocF32("x", n, c.HiddenSize) // the residual stream stays F32 on every backend
		w.h = alloc("h", n, c.HiddenSize)
		w.q = alloc("q", n, H, d)
		w.k = alloc("k", n, K, d)
		w.v = alloc("v", n, K, d)
		w.att = alloc("attn", n, H, d)
		w.o = allocF32("o", n, c.HiddenSize) // F32: added to the residual
		w.gate = alloc("gate", n, c.IntermediateSize)
		w.up = alloc("up", n, c.IntermediateSize)
		w.logits = allocF32("logits", logitRows, c.VocabSize) // F32 on every backend: greedy picks compare logits, bf16 would tie
		w.sel = alloc("selected rows", logitRows, c.HiddenSize)
		w.xLast = allocF32("selected residual rows", logitRows, c.HiddenSize)
	}()
	if err != nil {
		w.free()
		return nil, err
	}
	return w, nil
}

// rows returns the first n rows of t as a view.
func rows(t *runtime.Tensor, n int) *runtime.Tensor {
	v, err := t.Slice(0, n)
	if err != nil {
		panic(err) // n ≤ capacity is checked by the caller
	}
	return v
}

// Forward runs the tokens ids at positions cache.Len()..cache.Len()+T-1,
// appends their keys and values to the cache, and returns the logits: [T,V]
// when allLogits, else [1,V] for the last token. The returned tensor is the
// model's workspace: read it before the next forward on the model, by this
// goroutine or any other (Generate and ForwardBatchFunc read their logits
// under the model's forward lock; with Forward that is the caller's to
// arrange when it shares the model).
//
// It holds the model's forward lock (see Model): one forward at a time.
// On a sharded model (Group) it runs every shard in lockstep and returns
// rank 0's logits; cache must be the one the model's NewKVCache made.
// After Stop or Close it returns an error wrapping ErrClosed and runs
// nothing.
func (m *Model) Forward(b kernels.Backend, cache Cache, ids []int32, allLogits bool) (*runtime.Tensor, error) {
	if m == nil {
		return nil, errors.New("decoder.Forward: nil model")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.forward(b, cache, ids, allLogits)
}

// forward is Forward with the forward lock held.
func (m *Model) forward(b kernels.Backend, cache Cache, ids []int32, allLogits bool) (*runtime.Tensor, error) {
	if err := m.checkOpen("decoder.Forward"); err != nil {
		return nil, err
	}
	if m.group != nil {
		return m.group.forward(b, cache, ids, allLogits)
	}
	return m.localForward(b, cache, ids, allLogits)
}

// checkOpen is the error of a forward entry point (op names it) on a nil
// or closed model: Close freed the weights and the workspace, so running
// would read freed memory (on a GPU, device addresses the driver may have
// handed to another allocation) and allocate a new workspace nothing frees.
func (m *Model) checkOpen(op string) error {
	switch {
	case m == nil:
		return fmt.Errorf("%s: nil model", op)
	case m.closed:
		return fmt.Errorf("%s: %w", op, ErrClosed)
	}
	return nil
}

// checkForward is Forward's checks of its arguments.
func (m *Model) checkForward(cache Cache, ids []int32) error {
	T := len(ids)
	if T == 0 {
		return errors.New("decoder.Forward: no tokens")
	}
	for i, id := range ids {
		if id < 0 || int(id) >= m.Cfg.VocabSize {
			return fmt.Errorf("decoder.Forward: token id %d at position %d is outside the vocabulary [0, %d)", id, i, m.Cfg.VocabSize)
		}
	}
	if pos0 := cache.Len(); pos0+T > cache.Cap() {
		return fmt.Errorf("decoder.Forward: %d cached + %d new tokens exceed the KV cache capacity %d", pos0, T, cache.Cap())
	}
	return nil
}

// localForward is Forward on this model alone (one shard of a sharded one).
func (m *Model) localForward(b kernels.Backend, cache Cache, ids []int32, allLogits bool) (*runtime.Tensor, error) {
	if err := m.checkForward(cache, ids); err != nil {
		return nil, err
	}
	T, pos0 := len(ids), cache.Len()
	logitRows := 1
	if allLogits {
		logitRows = T
	}
	w, err := m.workspaceFor(b, T, logitRows)
	if err != nil {
		return nil, err
	}
	var logits *runtime.Tensor
	m.passTokens, m.passAsks = T, true
	err = nn.Call(m, func() error {
		if T == 1 {
			// Under hooks that have nothing to do for the layers (an offload
			// plan that streams nothing): the step replays as one graph.
			lg, ok, err := m.idleStep(b, w, cache, ids[0], pos0)
			if ok || err != nil {
				logits = lg
				return err
			}
		}
		var err error
		logits, err = m.body(b, w, cache, ids, allLogits)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := cache.Commit(T); err != nil {
		return nil, err
	}
	return logits, nil
}

// body is the forward of the root (inside its Call): embedding, layers,
// final norm and LM head over ids at position cache.Len(), into w; the
// logits of the last row, or of every row with allLogits.
func (m *Model) body(b kernels.Backend, w *workspace, cache Cache, ids []int32, allLogits bool) (*runtime.Tensor, error) {
	T, pos0 := len(ids), cache.Len()
	x := rows(w.x, T) // the residual stream [T,D]
	w.normed = tailNormed{}
	if err := m.Embed.Forward(b, x, ids); err != nil {
		return nil, err
	}
	if T == 1 && m.unitGraphs != nil {
		// The layers' graphs read the position from the step inputs.
		if err := m.unitGraphs.SetStep(ids, pos0); err != nil {
			return nil, err
		}
	}
	var lr *lastRows
	if !allLogits {
		lr = m.lastRowOf(x)
	}
	if err := m.runLayers(b, w, x, cache, lr); err != nil {
		return nil, err
	}
	if !allLogits {
		x = lastRow(x)
	}
	logits := rows(w.logits, x.Dim(0))
	if x.Dim(0) == 1 && w.takeNormed(m.Norm, x) { // the last down_proj's tail left Norm(x) in h (normtail.go)
		return logits, m.Head.Forward(b, logits, rows(w.h, 1))
	}
	return logits, m.head(b, logits, rows(w.h, x.Dim(0)), x)
}

// Forward of one decoder layer over the residual stream x[T,D], in place.
func (l *Layer) Forward(b kernels.Backend, w *workspace, x *runtime.Tensor, cache Cache) error {
	return nn.Call(l, func() error {
		if l.graph != nil && !w.onHost && x.Dim(0) == 1 {
			return l.graph.run(l, b, w, x, cache)
		}
		if ran, err := l.decodeLayer(b, w, x, cache, nil); ran || err != nil { // one op where the backend has it (hostlayer.go)
			return err
		}
		return l.body(b, w, x, cache)
	})
}

// body is the layer's computation, launched op by op:
// x += attn(norm(x)); x += mlp(norm(x)).
func (l *Layer) body(b kernels.Backend, w *workspace, x *runtime.Tensor, cache Cache) error {
	return l.ops(b, w, x, cache, nil)
}

// ops is body over one sequence's cache, or, with bs, over a batch of
// sequences packed in x's rows (a batched forward; cache unused).
func (l *Layer) ops(b kernels.Backend, w *workspace, x *runtime.Tensor, cache Cache, bs *batchState) error {
	T := x.Dim(0)
	h := rows(w.h, T)
	m := l.Node().Tree().Root().(*Model)
	// xo is the residual stream's rows past attention: x, or, in a
	// forward's last layer, the rows whose logits it returns (lastrows.go);
	// To of them.
	xo := x
	if w.last != nil {
		xo = w.last.x
	}
	To := xo.Dim(0)
	ho, o := rows(w.h, To), rows(w.o, To)
	accAttn, accMLP := l.accumulators(b, m, To)
	in := normed{h: h}
	prenormed := w.takeNormed(l.InputNorm, x) && T == 1 // the previous down_proj's tail left InputNorm(x) in h (normtail.go)
	if bs == nil && !prenormed {
		var err error
		if in, err = normInput(b, h, x, l.InputNorm, l.Attn, l.Attn.Q, l.Attn.K, l.Attn.V); err != nil {
			return err
		}
	} else if bs != nil {
		if err := l.InputNorm.Forward(b, h, x); err != nil {
			return err
		}
	}
	attnOut, oAcc := o, accAttn
	var oTail *tailAdder
	viaNorm := l.residualViaNorm(b, To, accAttn)
	if viaNorm != nil {
		attnOut, accAttn, oAcc = ho, nil, nil // o_proj writes bf16 into h (free once q, k, v are made); the add folds into the norm
	} else if accAttn != nil {
		attnOut = xo // o_proj adds into the residual stream
		if bs == nil {
			oAcc, oTail = withTail(b, accAttn, To, ho, l.PostNorm) // and may leave PostNorm(x) in h
		}
	}
	if w.last != nil {
		if err := w.last.gatherX(x); err != nil {
			return err
		}
	}
	if bs != nil {
		if err := l.Attn.forwardBatch(b, w, attnOut, h, bs, accAttn); err != nil {
			return err
		}
	} else if err := l.Attn.forward(b, w, attnOut, in, cache, oAcc); err != nil {
		return err
	}
	x, h, T = xo, ho, To // from here on the rows past attention
	mlpIn := normed{h: h}
	if viaNorm != nil {
		if err := viaNorm.AddBF16RMSNorm(h, x, h, l.PostNorm.Weight.Tensor(), l.PostNorm.Eps); err != nil {
			return err
		}
	} else if oTail != nil && oTail.ran {
		// h holds PostNorm(x) already.
	} else if accAttn != nil && accMLP != nil {
		var err error
		if mlpIn, err = normInput(b, h, x, l.PostNorm, l.MLP, l.MLP.Gate, l.MLP.Up); err != nil {
			return err
		}
	} else if accAttn != nil {
		if err := l.PostNorm.Forward(b, h, x); err != nil {
			return err
		}
	} else {
		if err := m.allReduce(b, o); err != nil { // a shard's partial sum of O (tensor parallelism)
			return err
		}
		if err := l.addPostNorm(b, h, x, o); err != nil {
			return err
		}
	}
	if accMLP != nil {
		downAcc := accMLP
		var downTail *tailAdder
		if bs == nil {
			downAcc, downTail = withTail(b, accMLP, T, h, m.nextNorm(l)) // and may leave the next norm of x in h
		}
		if err := l.MLP.forward(b, w, x, mlpIn, downAcc); err != nil { // down_proj adds into the residual stream
			return err
		}
		if downTail != nil && downTail.ran {
			w.normed = tailNormed{norm: downTail.norm, x: x.Ptr()}
		}
		return nil
	}
	if f := l.fp8Accumulator(b, m, T); f != nil {
		return l.MLP.forwardFP8Add(b, f, w, x, h, o) // the fused FP8 MLP adds into the residual stream (fp8mlp.go)
	}
	if err := l.ffn(b, w, o, h); err != nil {
		return err
	}
	if err := m.allReduce(b, o); err != nil { // and of down_proj
		return err
	}
	return b.Add(x, x, o)
}

// Forward of attention: out[T,D] = O(softmax(rope(q)·rope(k)ᵀ/√d)·v) over
// the cached positions and these (the last Window of them with a sliding
// window), with q, k, v = Q h, K h, V h of h[T,D] (plus biases), q and k
// normalised per head when the layer has q/k norms.
func (a *Attention) Forward(b kernels.Backend, w *workspace, out, h *runtime.Tensor, cache Cache) error {
	return a.forward(b, w, out, normed{h: h}, cache, nil)
}

// forward is Forward of the input in (normfuse.go: h, or the residual with
// its norm still to apply); with acc set, the output projection adds into
// out (out += O·att, see Layer.accumulators) instead of writing it.
func (a *Attention) forward(b kernels.Backend, w *workspace, out *runtime.Tensor, in normed, cache Cache, acc kernels.MatMulAdder) error {
	T := in.h.Dim(0)
	m := a.Node().Tree().Root().(*Model)
	return nn.Call(a, func() error {
		q, k, v := rows(w.q, T), rows(w.k, T), rows(w.v, T) // [T,H,d], [T,K,d], [T,K,d]
		// project, qkNorm, ropeAndAppend, fused for one token (ropefuse.go)
		if err := a.projectRoPE(b, m.invFreq, in, q, k, v, cache); err != nil {
			return err
		}
		if err := a.scaleQ(b, q); err != nil {
			return err
		}
		kc, vc := cache.View(a.Layer) // [C,K,d]
		att := rows(w.att, T)         // [T,H,d]
		if err := kernels.AttendWindow(b, att, q, kc, vc, cache.Len(), a.Window); err != nil {
			return err
		}
		if w.last != nil { // the forward's last layer: only the rows whose logits it returns go on
			var err error
			if att, err = w.last.attRows(w.q, att); err != nil {
				return err
			}
		}
		return a.output(b, out, att, acc)
	})
}

// scaleQ multiplies the rotated queries by QScale, when there is one.
func (a *Attention) scaleQ(b kernels.Backend, q *runtime.Tensor) error {
	if a.QScale == 0 {
		return nil
	}
	return kernels.ScaleBy(b, q, a.QScale)
}

// qkNorm normalises each head of q[T,H,d] and k[T,K,d] in place with the
// layer's q/k norms: the RMSNorm over d of the [T·H, d] and [T·K, d] views.
// It does nothing without them.
func (a *Attention) qkNorm(b kernels.Backend, q, k *runtime.Tensor) error {
	if a.QNorm == nil {
		return nil
	}
	if p, ok := b.(kernels.PairRMSNormer); ok && a.QNorm.Eps == a.KNorm.Eps && a.QNorm.Dim == a.KNorm.Dim && nn.Unwatched(a.QNorm, a.KNorm) {
		qh, err := q.Reshape(q.NumElements()/a.QNorm.Dim, a.QNorm.Dim)
		if err != nil {
			return err
		}
		kh, err := k.Reshape(k.NumElements()/a.KNorm.Dim, a.KNorm.Dim)
		if err != nil {
			return err
		}
		return p.PairRMSNorm(qh, a.QNorm.Weight.Tensor(), kh, a.KNorm.Weight.Tensor(), a.QNorm.Eps)
	}
	for _, c := range []struct {
		n *nn.RMSNorm
		x *runtime.Tensor
	}{{a.QNorm, q}, {a.KNorm, k}} {
		heads, err := c.x.Reshape(c.x.NumElements()/c.n.Dim, c.n.Dim)
		if err != nil {
			return err
		}
		if err := c.n.Forward(b, heads, heads); err != nil {
			return err
		}
	}
	return nil
}

// Forward of the MLP: out[T,D] = down(silu(gate(h))·up(h)).
func (p *MLP) Forward(b kernels.Backend, w *workspace, out, h *runtime.Tensor) error {
	return p.forward(b, w, out, normed{h: h}, nil)
}

// forward is Forward of the input in (normfuse.go); with acc set, the down
// projection adds into out (out += Down·act, see Layer.accumulators)
// instead of writing it.
func (p *MLP) forward(b kernels.Backend, w *workspace, out *runtime.Tensor, in normed, acc kernels.MatMulAdder) error {
	T := in.h.Dim(0)
	return nn.Call(p, func() error {
		g, u := rows(w.gate, T), rows(w.up, T) // [T,I]
		if f := p.fp8Fused(b, T); f != nil && acc == nil {
			h, err := in.ready(b) // a pending norm folds only into plain weights' GEMVs
			if err != nil {
				return err
			}
			return f.MLPFP8(out, h, g, u, nil, p.fp8Weights(), false) // fp8mlp.go
		}
		if err := p.gateUp(b, g, u, in); err != nil {
			return err
		}
		if acc != nil {
			return acc.MatMulAdd(out, g, p.Down.Weight.Tensor())
		}
		return p.Down.Forward(b, out, g)
	})
}

func lastRow(x *runtime.Tensor) *runtime.Tensor {
	v, err := x.Slice(x.Dim(0)-1, x.Dim(0))
	if err != nil {
		panic(err)
	}
	return v
}

// WorkspaceBytes is the device memory the model's activation workspace holds
// now (0 before the first forward or after Close). It waits for the forward
// in progress, if any, so it must not be called from inside a forward (an
// offload hook): the forward lock is not re-entrant.
func (m *Model) WorkspaceBytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ws == nil {
		return 0
	}
	var n int64
	for _, b := range m.ws.bufs {
		n += b.Size()
	}
	return n
}
