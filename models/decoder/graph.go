package decoder

import (
	"errors"
	"fmt"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// DecodeGraph is a one-token forward step recorded once (a CUDA graph on the
// CUDA backend) and replayed at successive positions: the decode path without
// per-op launch overhead. The token id and position reach the recorded ops
// through the backend's step inputs (kernels.StepCapturer.SetStep); every
// tensor the step touches (weights, KV cache, the model's workspace) is the
// one alive at capture, so the graph is only valid while they are: a Forward
// that grows the workspace or a rebinding of any weight (the tree's
// nn.Tree.BindGeneration moved) makes Step fail; a freed cache is the
// caller's to avoid. It needs a model with no nn hooks (no offload engine
// attached) whose expert blocks, if any, run through the backend's fused
// expert ops (kernels.MoEFused: the routing stays on the device).
type DecodeGraph struct {
	m      *Model
	b      kernels.StepCapturer
	cache  Cache
	ws     *workspace
	binds  uint64
	g      kernels.Graph
	logits *runtime.Tensor
	// feed, when set, is the backend whose ArgmaxFeed ends the recorded
	// step (Generate's device-fed greedy decoding, fed.go).
	feed kernels.TokenFeeder
}

// CaptureDecode records a one-token step of m over cache on b. The cache's
// contents and length are unchanged; nothing runs until Step. It holds the
// model's forward lock; after Stop or Close it returns an error wrapping
// ErrClosed.
func (m *Model) CaptureDecode(b kernels.Backend, cache Cache) (*DecodeGraph, error) {
	if m == nil {
		return nil, errors.New("decoder.CaptureDecode: nil model")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.captureDecode(b, cache, nil)
}

// captureDecode is CaptureDecode with the forward lock held. With feed
// set (b itself), the step ends with feed.ArgmaxFeed of its logits.
func (m *Model) captureDecode(b kernels.Backend, cache Cache, feed kernels.TokenFeeder) (*DecodeGraph, error) {
	if err := m.checkOpen("decoder.CaptureDecode"); err != nil {
		return nil, err
	}
	sc, ok := b.(kernels.StepCapturer)
	if !ok {
		return nil, fmt.Errorf("decoder.CaptureDecode: the %T backend cannot capture graphs", b)
	}
	if m.tp != nil {
		return nil, errors.New("decoder.CaptureDecode: a sharded model runs its shards' collectives eagerly")
	}
	if m.Node().Tree().HasHooks() {
		return nil, errors.New("decoder.CaptureDecode: the model has hooks (an offload engine?) whose work must run at every step; run it eagerly (Forward replays a recorded step by itself while every hook has nothing to do: an offload plan that streams nothing)")
	}
	if host, err := m.hostRouted(b); err != nil {
		return nil, fmt.Errorf("decoder.CaptureDecode: %w", err)
	} else if host {
		return nil, errors.New("decoder.CaptureDecode: the model routes tokens to experts on the host (the backend has no fused expert ops for these weights, or they are FP8); run it eagerly")
	}
	if cache.Len() >= cache.Cap() {
		return nil, fmt.Errorf("decoder.CaptureDecode: the KV cache is full (%d positions)", cache.Cap())
	}
	n := cache.Len()
	binds := m.Node().Tree().BindGeneration()
	var logits *runtime.Tensor
	g, err := sc.CaptureStep(func() error {
		var err error
		logits, err = m.forward(b, cache, []int32{0}, false) // the id only sizes the work (the lock is held)
		if err == nil && feed != nil {
			err = feed.ArgmaxFeed(logits)
		}
		return err
	})
	_ = cache.Truncate(n) // n ≤ Len(): cannot fail
	if err != nil {
		return nil, fmt.Errorf("decoder.CaptureDecode: %w", err)
	}
	return &DecodeGraph{m: m, b: sc, cache: cache, ws: m.ws, binds: binds, g: g, logits: logits, feed: feed}, nil
}

// Step runs token id at position cache.Len(), appends its key and value to the
// cache and returns the logits [1,V] (F32; the model's workspace, valid until
// the next step or Forward).
func (g *DecodeGraph) Step(id int32) (*runtime.Tensor, error) { return g.StepAt(id, g.cache.Len()) }

// StepAt runs token id at position pos ≤ cache.Len() (positions from pos on
// are overwritten; the cache then holds pos+1 positions) and returns the
// logits. It holds the model's forward lock (see Model); after the model's
// Stop or Close it returns an error wrapping ErrClosed.
func (g *DecodeGraph) StepAt(id int32, pos int) (*runtime.Tensor, error) {
	g.m.mu.Lock()
	defer g.m.mu.Unlock()
	return g.stepAt(id, pos)
}

// stepAt is StepAt with the model's forward lock held.
func (g *DecodeGraph) stepAt(id int32, pos int) (*runtime.Tensor, error) {
	if err := g.check(pos); err != nil {
		return nil, err
	}
	if id < 0 || int(id) >= g.m.Cfg.VocabSize {
		return nil, fmt.Errorf("decoder.DecodeGraph: token id %d is outside the vocabulary [0, %d)", id, g.m.Cfg.VocabSize)
	}
	if err := g.b.SetStep([]int32{id}, pos); err != nil {
		return nil, err
	}
	return g.replay(pos)
}

// check says why the graph cannot run a step at position pos now (the
// forward lock held): a closed model or graph, a position outside the
// cache, a workspace or weights changed since the capture.
func (g *DecodeGraph) check(pos int) error {
	if g.m.closed {
		return fmt.Errorf("decoder.DecodeGraph: %w", ErrClosed)
	}
	if n := g.cache.Len(); pos < 0 || pos > n || pos >= g.cache.Cap() {
		return fmt.Errorf("decoder.DecodeGraph: position %d with %d cached of capacity %d", pos, n, g.cache.Cap())
	}
	if g.g == nil {
		return errors.New("decoder.DecodeGraph: the graph is closed")
	}
	if g.m.ws != g.ws {
		return errors.New("decoder.DecodeGraph: the model's workspace changed since the capture (a larger Forward ran); capture again")
	}
	if g.m.Node().Tree().BindGeneration() != g.binds {
		return errors.New("decoder.DecodeGraph: the model's weights were rebound since the capture; capture again")
	}
	return nil
}

// replay enqueues the recorded step at position pos (checked; the step
// buffer set by SetStep or, on a fed graph, by the previous step's
// ArgmaxFeed) and makes the cache hold pos+1 positions.
func (g *DecodeGraph) replay(pos int) (*runtime.Tensor, error) {
	if err := g.g.Replay(); err != nil {
		return nil, err
	}
	if err := g.cache.Truncate(pos); err != nil {
		return nil, err
	}
	if err := g.cache.Commit(1); err != nil {
		return nil, err
	}
	return g.logits, nil
}

// Close frees the graph (not the cache or the model). It holds the model's
// forward lock, so it waits for a StepAt in progress in another goroutine;
// like Stop, it must not be called from inside a forward.
func (g *DecodeGraph) Close() error {
	g.m.mu.Lock()
	defer g.m.mu.Unlock()
	return g.close()
}

// close is Close with the model's forward lock held (the stepper's and
// stop's path: they hold it already).
func (g *DecodeGraph) close() error {
	if g.g == nil {
		return nil
	}
	err := g.g.Close()
	g.g = nil
	return err
}

// stepper runs Generate's forwards, with the model's forward lock held:
// one-token steps through a DecodeGraph when the backend can capture one
// (made at the first such step, and again when another goroutine's larger
// forward replaced the workspace between two steps), the rest through
// Forward.
type stepper struct {
	eager bool
	g     *DecodeGraph
	// Device-fed greedy decoding (fed.go): feed is the backend when
	// Generate uses it (the graph then ends with ArgmaxFeed); chain says
	// that the step buffer holds this stepper's next token and position,
	// valid while feed.StepSets() is still sets; pending are the
	// positions of the fed steps posted and not yet read.
	feed    kernels.TokenFeeder
	chain   bool
	sets    uint64
	pending []fedStep
}

func (s *stepper) forward(m *Model, b kernels.Backend, cache Cache, ids []int32) (*runtime.Tensor, error) {
	if len(ids) != 1 || s.eager {
		return m.forward(b, cache, ids, false)
	}
	g, ok, err := s.graph(m, b, cache)
	if err != nil {
		return nil, err
	}
	if !ok {
		s.eager = true
		return m.forward(b, cache, ids, false)
	}
	s.chain = false // SetStep moves the step buffer off any chain of fed steps
	return g.stepAt(ids[0], g.cache.Len())
}

// graph is the stepper's DecodeGraph over cache, recorded at the first
// call and again when another Generate's larger forward (between two of
// this one's steps) grew the workspace the graph recorded; ok is false (no
// graph, no error) when the model cannot replay one on b (graphable). Both
// the step-by-step forward and the fed steps (enqueueFed) get it here.
func (s *stepper) graph(m *Model, b kernels.Backend, cache Cache) (*DecodeGraph, bool, error) {
	if s.g != nil && s.g.ws != m.ws && !m.closed {
		s.g.close()
		s.g = nil
	}
	if s.g == nil {
		ok, err := graphable(m, b)
		if err != nil || !ok {
			return nil, false, err
		}
		g, err := m.captureDecode(b, cache, s.feed)
		if err != nil {
			return nil, false, err
		}
		s.g = g
	}
	return s.g, true, nil
}

// graphable says whether Generate's one-token steps on b can replay a
// DecodeGraph: a capturing backend, a model with no hooks, not sharded,
// with its experts (if any) routed on the device.
func graphable(m *Model, b kernels.Backend) (bool, error) {
	_, ok := b.(kernels.StepCapturer)
	ok = ok && !m.Node().Tree().HasHooks() && m.tp == nil
	if ok {
		host, err := m.hostRouted(b)
		if err != nil {
			return false, err
		}
		ok = !host
	}
	return ok, nil
}

// close drains the fed steps still in flight (their work reads and writes
// the cache the caller frees next) and frees the graph.
func (s *stepper) close() {
	for _, st := range s.pending {
		_, _ = s.feed.FedToken(st.ticket) // only waits: the pick is not wanted
	}
	s.pending = nil
	if s.g != nil {
		s.g.close()
		s.g = nil
	}
}
