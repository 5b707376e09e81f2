package llama

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// KVCache holds each layer's keys and values, [C,K,d] each, for positions
// 0..Len()-1.
type KVCache struct {
	K, V []*runtime.Tensor
	n    int
	bufs []*runtime.DeviceBuffer
}

// NewKVCache allocates a cache of capacity positions on b's device.
func (m *Model) NewKVCache(b kernels.Backend, capacity int) (*KVCache, error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("llama: KV cache capacity %d must be positive", capacity)
	}
	c := &KVCache{}
	shape := runtime.Shape{capacity, m.Cfg.NumKeyValueHeads, m.Cfg.HeadDim}
	for i := range m.Layers {
		for _, kv := range []string{"k", "v"} {
			t, err := runtime.NewTensor(b.Device(), b.ActDType(), shape, fmt.Sprintf("kv cache layer %d %s", i, kv))
			if err != nil {
				c.Free()
				return nil, err
			}
			c.bufs = append(c.bufs, t.Buffer())
			if kv == "k" {
				c.K = append(c.K, t)
			} else {
				c.V = append(c.V, t)
			}
		}
	}
	return c, nil
}

// Len is the number of positions filled.
func (c *KVCache) Len() int { return c.n }

// Cap is the number of positions the cache holds.
func (c *KVCache) Cap() int { return c.K[0].Dim(0) }

// Reset empties the cache (the memory is kept).
func (c *KVCache) Reset() { c.n = 0 }

// Free returns the cache's memory.
func (c *KVCache) Free() {
	for _, b := range c.bufs {
		b.Free()
	}
	c.bufs = nil
}

// workspace holds the activations of one forward of up to cap tokens.
type workspace struct {
	cap, logitCap         int
	act                   runtime.DType
	x, h, q, k, v, att, o *runtime.Tensor // [cap, …]
	gate, up, logits      *runtime.Tensor
	bufs                  []*runtime.DeviceBuffer
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
	}()
	if err != nil {
		w.free()
		return nil, err
	}
	m.ws = w
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
// model's workspace: read it before the next Forward.
func (m *Model) Forward(b kernels.Backend, cache *KVCache, ids []int32, allLogits bool) (*runtime.Tensor, error) {
	T := len(ids)
	if T == 0 {
		return nil, errors.New("llama.Forward: no tokens")
	}
	for i, id := range ids {
		if id < 0 || int(id) >= m.Cfg.VocabSize {
			return nil, fmt.Errorf("llama.Forward: token id %d at position %d is outside the vocabulary [0, %d)", id, i, m.Cfg.VocabSize)
		}
	}
	pos0 := cache.Len()
	if pos0+T > cache.Cap() {
		return nil, fmt.Errorf("llama.Forward: %d cached + %d new tokens exceed the KV cache capacity %d", pos0, T, cache.Cap())
	}
	logitRows := 1
	if allLogits {
		logitRows = T
	}
	w, err := m.workspaceFor(b, T, logitRows)
	if err != nil {
		return nil, err
	}
	var logits *runtime.Tensor
	err = nn.Call(m, func() error {
		x := rows(w.x, T)
		if err := m.Embed.Forward(b, x, ids); err != nil {
			return err
		}
		if T == 1 && m.unitGraphs != nil {
			// The layers' graphs read the position from the step inputs.
			if err := m.unitGraphs.SetStep(ids, pos0); err != nil {
				return err
			}
		}
		for i, l := range m.Layers {
			if err := l.Forward(b, w, x, cache.K[i], cache.V[i], pos0); err != nil {
				return err
			}
		}
		src := x
		if !allLogits {
			src = lastRow(x)
		}
		n := src.Dim(0)
		h := rows(w.h, n)
		if err := m.Norm.Forward(b, h, src); err != nil {
			return err
		}
		logits = rows(w.logits, n)
		return m.Head.Forward(b, logits, h)
	})
	if err != nil {
		return nil, err
	}
	cache.n = pos0 + T
	return logits, nil
}

// Forward of one decoder layer over x[T,D] in place.
func (l *Layer) Forward(b kernels.Backend, w *workspace, x, kc, vc *runtime.Tensor, pos0 int) error {
	return nn.Call(l, func() error {
		if l.graph != nil && x.Dim(0) == 1 {
			return l.graph.run(l, b, w, x, kc, vc, pos0)
		}
		return l.body(b, w, x, kc, vc, pos0)
	})
}

// body is the layer's computation, launched op by op.
func (l *Layer) body(b kernels.Backend, w *workspace, x, kc, vc *runtime.Tensor, pos0 int) error {
	T := x.Dim(0)
	h := rows(w.h, T)
	if err := l.InputNorm.Forward(b, h, x); err != nil {
		return err
	}
	if err := l.Attn.Forward(b, w, h, kc, vc, pos0); err != nil {
		return err
	}
	o := rows(w.o, T)
	if err := b.Add(x, x, o); err != nil {
		return err
	}
	if err := l.PostNorm.Forward(b, h, x); err != nil {
		return err
	}
	if err := l.MLP.Forward(b, w, o, h); err != nil {
		return err
	}
	return b.Add(x, x, o)
}

// Forward of attention: reads h[T,D], writes w.o[T,D].
func (a *Attention) Forward(b kernels.Backend, w *workspace, h, kc, vc *runtime.Tensor, pos0 int) error {
	T := h.Dim(0)
	m := a.Node().Tree().Root().(*Model)
	return nn.Call(a, func() error {
		q, k, v := rows(w.q, T), rows(w.k, T), rows(w.v, T)
		if err := a.project(b, h, q, k, v); err != nil {
			return err
		}
		if err := ropeAndStore(b, m.invFreq, q, k, v, kc, vc, pos0); err != nil {
			return err
		}
		att := rows(w.att, T)
		if err := b.Attention(att, q, kc, vc, pos0); err != nil {
			return err
		}
		return a.O.Forward(b, rows(w.o, T), att)
	})
}

// Forward of the MLP: out[T,D] = down(silu(gate(h))·up(h)).
func (p *MLP) Forward(b kernels.Backend, w *workspace, out, h *runtime.Tensor) error {
	T := h.Dim(0)
	return nn.Call(p, func() error {
		g, u := rows(w.gate, T), rows(w.up, T)
		if err := p.gateUp(b, g, u, h); err != nil {
			return err
		}
		return p.Down.Forward(b, out, g)
	})
}

// GenerateOptions steer Generate.
type GenerateOptions struct {
	MaxNewTokens int                  // stop after this many new tokens
	Sampling     kernels.SampleParams // Temperature 0 = greedy
	Seed         uint64               // seeds the sampler
	IgnoreEOS    bool                 // keep going past end-of-sequence tokens
	StopTokens   []int32              // more tokens that end generation (a chat turn's end)
	// OnToken, when set, sees each new token as it is chosen; an error stops
	// generation and is returned.
	OnToken func(id int32) error
	// Eager runs every step op by op. Otherwise, on a backend that can
	// capture graphs (kernels.StepCapturer) and a model without hooks,
	// one-token steps replay a captured DecodeGraph.
	Eager bool
}

// Generate runs the prompt, then chooses up to MaxNewTokens tokens one at a
// time, stopping after an EOS token (which is included). It returns the new
// tokens.
func (m *Model) Generate(b kernels.Backend, prompt []int32, opt GenerateOptions) ([]int32, error) {
	if len(prompt) == 0 {
		return nil, errors.New("llama.Generate: empty prompt")
	}
	if opt.MaxNewTokens < 0 {
		return nil, fmt.Errorf("llama.Generate: max new tokens %d is negative", opt.MaxNewTokens)
	}
	cache, err := m.NewKVCache(b, len(prompt)+max(opt.MaxNewTokens, 1))
	if err != nil {
		return nil, err
	}
	defer cache.Free()
	rng := rand.New(rand.NewPCG(opt.Seed, opt.Seed^0x9e3779b97f4a7c15))
	logits := make([]float32, m.Cfg.VocabSize)
	var out []int32
	next := prompt
	steps := stepper{eager: opt.Eager}
	defer steps.close()
	for len(out) < opt.MaxNewTokens {
		lt, err := steps.forward(m, b, cache, next)
		if err != nil {
			return out, err
		}
		if err := b.ReadF32(logits, lt); err != nil {
			return out, err
		}
		id, err := kernels.Sample(logits, opt.Sampling, rng)
		if err != nil {
			return out, err
		}
		tok := int32(id)
		out = append(out, tok)
		if opt.OnToken != nil {
			if err := opt.OnToken(tok); err != nil {
				return out, err
			}
		}
		if !opt.IgnoreEOS && (slices.Contains(m.Cfg.EOSTokenIDs, int(tok)) || slices.Contains(opt.StopTokens, tok)) {
			break
		}
		next = []int32{tok}
	}
	return out, nil
}

func lastRow(x *runtime.Tensor) *runtime.Tensor {
	v, err := x.Slice(x.Dim(0)-1, x.Dim(0))
	if err != nil {
		panic(err)
	}
	return v
}

// WorkspaceBytes is the device memory the model's activation workspace holds
// now (0 before the first forward or after Close).
func (m *Model) WorkspaceBytes() int64 {
	if m.ws == nil {
		return 0
	}
	var n int64
	for _, b := range m.ws.bufs {
		n += b.Size()
	}
	return n
}
