package llama

import (
	"errors"
	"fmt"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// DecodeGraph is a one-token forward step recorded once (a CUDA graph on the
// CUDA backend) and replayed at successive positions: the decode path without
// per-op launch overhead. The token id and position reach the recorded ops
// through the backend's step inputs (kernels.StepCapturer.SetStep); every
// tensor the step touches (weights, KV cache, the model's workspace) is the
// one alive at capture, so the graph is only valid while they are: a Forward
// that grows the workspace, a rebinding of the weights or a freed cache
// invalidates it (Step detects the first). It needs a model with no nn hooks
// (no offload engine attached).
type DecodeGraph struct {
	m      *Model
	b      kernels.StepCapturer
	cache  *KVCache
	ws     *workspace
	g      kernels.Graph
	logits *runtime.Tensor
}

// CaptureDecode records a one-token step of m over cache on b. The cache's
// contents and length are unchanged; nothing runs until Step.
func (m *Model) CaptureDecode(b kernels.Backend, cache *KVCache) (*DecodeGraph, error) {
	sc, ok := b.(kernels.StepCapturer)
	if !ok {
		return nil, fmt.Errorf("llama.CaptureDecode: the %T backend cannot capture graphs", b)
	}
	if t := m.Node().Tree(); t != nil && t.HasHooks() {
		return nil, errors.New("llama.CaptureDecode: the model has hooks (an offload engine?) whose work must run at every step; run it eagerly")
	}
	if cache.Len() >= cache.Cap() {
		return nil, fmt.Errorf("llama.CaptureDecode: the KV cache is full (%d positions)", cache.Cap())
	}
	n := cache.n
	var logits *runtime.Tensor
	g, err := sc.CaptureStep(func() error {
		var err error
		logits, err = m.Forward(b, cache, []int32{0}, false) // the id only sizes the work
		return err
	})
	cache.n = n
	if err != nil {
		return nil, fmt.Errorf("llama.CaptureDecode: %w", err)
	}
	return &DecodeGraph{m: m, b: sc, cache: cache, ws: m.ws, g: g, logits: logits}, nil
}

// Step runs token id at position cache.Len(), appends its key and value to the
// cache and returns the logits [1,V] (F32; the model's workspace, valid until
// the next step or Forward).
func (g *DecodeGraph) Step(id int32) (*runtime.Tensor, error) { return g.StepAt(id, g.cache.n) }

// StepAt runs token id at position pos ≤ cache.Len() (positions from pos on
// are overwritten; the cache then holds pos+1 positions) and returns the logits.
func (g *DecodeGraph) StepAt(id int32, pos int) (*runtime.Tensor, error) {
	if id < 0 || int(id) >= g.m.Cfg.VocabSize {
		return nil, fmt.Errorf("llama.DecodeGraph: token id %d is outside the vocabulary [0, %d)", id, g.m.Cfg.VocabSize)
	}
	if pos < 0 || pos > g.cache.n || pos >= g.cache.Cap() {
		return nil, fmt.Errorf("llama.DecodeGraph: position %d with %d cached of capacity %d", pos, g.cache.n, g.cache.Cap())
	}
	if g.m.ws != g.ws || g.g == nil {
		return nil, errors.New("llama.DecodeGraph: the model's workspace changed since the capture (a larger Forward ran); capture again")
	}
	if err := g.b.SetStep([]int32{id}, pos); err != nil {
		return nil, err
	}
	if err := g.g.Replay(); err != nil {
		return nil, err
	}
	g.cache.n = pos + 1
	return g.logits, nil
}

// Close frees the graph (not the cache or the model).
func (g *DecodeGraph) Close() error {
	if g.g == nil {
		return nil
	}
	err := g.g.Close()
	g.g = nil
	return err
}

// stepper runs Generate's forwards: one-token steps through a DecodeGraph
// when the backend can capture one (made at the first such step), the rest
// through Forward.
type stepper struct {
	eager bool
	g     *DecodeGraph
}

func (s *stepper) forward(m *Model, b kernels.Backend, cache *KVCache, ids []int32) (*runtime.Tensor, error) {
	if len(ids) != 1 || s.eager {
		return m.Forward(b, cache, ids, false)
	}
	if s.g == nil {
		if _, ok := b.(kernels.StepCapturer); !ok {
			s.eager = true
			return m.Forward(b, cache, ids, false)
		}
		if t := m.Node().Tree(); t != nil && t.HasHooks() {
			s.eager = true
			return m.Forward(b, cache, ids, false)
		}
		g, err := m.CaptureDecode(b, cache)
		if err != nil {
			return nil, err
		}
		s.g = g
	}
	return s.g.Step(ids[0])
}

func (s *stepper) close() {
	if s.g != nil {
		s.g.Close()
	}
}

// ropeAndStore rotates q and k and writes k and v into the layer's caches at
// pos0: one fused op where the backend has it (kernels.RoPEStorer), else RoPE,
// RoPE, StoreKV, StoreKV.
func ropeAndStore(b kernels.Backend, invFreq []float32, q, k, v, kc, vc *runtime.Tensor, pos0 int) error {
	if f, ok := b.(kernels.RoPEStorer); ok {
		return f.RoPEStoreKV(q, k, v, kc, vc, pos0, invFreq)
	}
	if err := b.RoPE(q, pos0, invFreq); err != nil {
		return err
	}
	if err := b.RoPE(k, pos0, invFreq); err != nil {
		return err
	}
	if err := b.StoreKV(kc, k, pos0); err != nil {
		return err
	}
	return b.StoreKV(vc, v, pos0)
}

// Truncate drops positions n.. from the cache (the memory is kept): the next
// Forward writes position n. Benchmarks use it to time steps at a fixed
// context.
func (c *KVCache) Truncate(n int) error {
	if n < 0 || n > c.n {
		return fmt.Errorf("llama.KVCache.Truncate(%d): the cache holds %d positions", n, c.n)
	}
	c.n = n
	return nil
}

// fusable reports whether module m may run its children's ops fused: the
// fused op skips the children's nn.Call, so no hook may be watching them.
func fusable(m nn.Module) bool {
	t := m.Node().Tree()
	return t == nil || !t.HasHooks()
}

// project computes q, k and v from h[T,D]: for one token in one op where the
// backend fuses them (kernels.MultiMatMuler), else as three Linear forwards.
func (a *Attention) project(b kernels.Backend, h, q, k, v *runtime.Tensor) error {
	if f, ok := b.(kernels.MultiMatMuler); ok && h.Dim(0) == 1 && fusable(a) {
		return f.MatMulN([]*runtime.Tensor{q, k, v}, h,
			[]*runtime.Tensor{a.Q.Weight.Tensor(), a.K.Weight.Tensor(), a.V.Weight.Tensor()})
	}
	if err := a.Q.Forward(b, q, h); err != nil {
		return err
	}
	if err := a.K.Forward(b, k, h); err != nil {
		return err
	}
	return a.V.Forward(b, v, h)
}

// gateUp leaves silu(gate(h))·up(h) in g (u is scratch): for one token in one
// op where the backend fuses it (kernels.GateUpSiLUer), else gate, up, SiLUMul.
func (p *MLP) gateUp(b kernels.Backend, g, u, h *runtime.Tensor) error {
	if f, ok := b.(kernels.GateUpSiLUer); ok && h.Dim(0) == 1 && fusable(p) {
		return f.GateUpSiLU(g, h, p.Gate.Weight.Tensor(), p.Up.Weight.Tensor())
	}
	if err := p.Gate.Forward(b, g, h); err != nil {
		return err
	}
	if err := p.Up.Forward(b, u, h); err != nil {
		return err
	}
	return b.SiLUMul(g, g, u)
}
