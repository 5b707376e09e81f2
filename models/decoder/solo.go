package decoder

import (
	"errors"
	"fmt"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/kvcache"
	"github.com/flextensor-go/flextensor/runtime"
)

// ErrNoGraph is wrapped by NewSolo's error when the model's one-token
// steps on the backend cannot replay a captured graph: the backend is no
// kernels.StepCapturer, the model has hooks (an offload engine), is
// sharded, or routes its experts on the host.
var ErrNoGraph = errors.New("the model's decode steps cannot replay a captured graph on this backend")

// Solo runs the decode steps of one sequence of a paged KV cache through a
// captured DecodeGraph (as Generate's stepper does) instead of batched
// forwards over the paged blocks: NewSolo copies the sequence's keys and
// values into a contiguous KVCache sized for its reach and captures a step
// over it; each Step runs the next position there and commits it in the
// sequence too (whose blocks the caller reserves as for a batched
// forward); Sync copies the positions stepped so far back into the
// sequence's blocks, after which batched forwards may use the sequence
// again. models/generate.Scheduler uses it while one request runs alone.
//
// The contiguous cache is the model's like a Generate's: Stop and Close
// free it with the graph, and later steps return ErrClosed. Close frees it
// otherwise. A Solo is used from one goroutine at a time.
type Solo struct {
	m     *Model
	b     kernels.Backend
	paged *kvcache.Paged
	seq   *kvcache.Seq
	cache *KVCache
	steps *stepper
	// synced: the sequence's positions 0..synced−1 are current in its
	// paged blocks.
	synced int
}

// NewSolo copies seq's keys and values (its Len() positions, from its
// paged cache) into a new contiguous KV cache of capacity positions
// (more than seq.Len()) and captures a one-token step over it. Errors: a
// closed model (ErrClosed), a model or backend that cannot replay a graph
// (ErrNoGraph), a sequence of no paged cache (not made by
// kvcache.Paged.NewSeq), a freed or swapped-out sequence, a cache shaped
// for another model or of another dtype or device than the backend's, too
// small a capacity, too little device memory. It holds
// the model's forward lock.
func (m *Model) NewSolo(b kernels.Backend, seq *kvcache.Seq, capacity int) (*Solo, error) {
	if m == nil || b == nil || seq == nil {
		return nil, errors.New("decoder.NewSolo: a model, a backend and a sequence are needed")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("decoder.NewSolo: %w", ErrClosed)
	}
	ok, err := graphable(m, b)
	if err != nil {
		return nil, fmt.Errorf("decoder.NewSolo: %w", err)
	}
	if !ok {
		return nil, fmt.Errorf("decoder.NewSolo: %w", ErrNoGraph)
	}
	paged := seq.Cache()
	if paged == nil {
		return nil, errors.New("decoder.NewSolo: the sequence belongs to no paged cache (make it with kvcache.Paged.NewSeq)")
	}
	switch cfg, want, k := paged.Config(), m.PagedConfig(0, 0), paged.K[0]; {
	case seq.Freed() || seq.Swapped():
		return nil, errors.New("decoder.NewSolo: the sequence is freed or swapped out")
	case cfg.Layers != want.Layers || cfg.KVHeads != want.KVHeads || cfg.HeadDim != want.HeadDim:
		return nil, fmt.Errorf("decoder.NewSolo: the paged cache has %d layers × %d KV heads × %d, the model %d × %d × %d",
			cfg.Layers, cfg.KVHeads, cfg.HeadDim, want.Layers, want.KVHeads, want.HeadDim)
	case k.DType() != b.ActDType() || k.Device() != b.Device():
		return nil, fmt.Errorf("decoder.NewSolo: the paged cache is %v on %s, the backend computes in %v on %s",
			k.DType(), k.Device().Name(), b.ActDType(), b.Device().Name())
	case capacity <= seq.Len():
		return nil, fmt.Errorf("decoder.NewSolo: capacity %d leaves no room after the sequence's %d positions", capacity, seq.Len())
	}
	cache, err := m.newKVCache(b, capacity)
	if err != nil {
		return nil, fmt.Errorf("decoder.NewSolo: %w", err)
	}
	n := seq.Len()
	for l := range m.Layers {
		if err := paged.Gather(b, l, seq, n, cache.K[l], cache.V[l]); err != nil {
			cache.Free()
			return nil, fmt.Errorf("decoder.NewSolo: %w", err)
		}
	}
	cache.n = n
	g, err := m.captureDecode(b, cache, nil)
	if err != nil {
		cache.Free()
		return nil, err
	}
	steps := &stepper{g: g}
	if m.live == nil {
		m.live = map[*KVCache]*stepper{}
	}
	m.live[cache] = steps
	return &Solo{m: m, b: b, paged: paged, seq: seq, cache: cache, steps: steps, synced: n}, nil
}

// Len is the number of positions the contiguous cache holds (the
// sequence's, while it is stepped only here).
func (s *Solo) Len() int { return s.cache.Len() }

// Cap is the capacity given to NewSolo.
func (s *Solo) Cap() int { return s.cache.Cap() }

// check says why s cannot be used now (the forward lock held).
func (s *Solo) check(what string) error {
	if s.m.closed {
		return fmt.Errorf("decoder.Solo.%s: %w", what, ErrClosed)
	}
	if _, ok := s.m.live[s.cache]; !ok {
		return fmt.Errorf("decoder.Solo.%s: closed", what)
	}
	if s.seq.Freed() || s.seq.Swapped() {
		return fmt.Errorf("decoder.Solo.%s: the sequence is freed or swapped out", what)
	}
	return nil
}

// StepFunc runs token id at the next position (the sequence's Len(), whose
// room the caller reserved: kvcache.Seq.Reserve) through the captured
// graph, commits the position in the contiguous cache and the sequence,
// and calls read with the logits [1,V], all under the model's forward lock
// (read must not call the model's forwards). The graph is captured again
// when another forward grew the model's workspace since. The sequence's
// paged blocks are not written: Sync does that.
func (s *Solo) StepFunc(id int32, read func(logits *runtime.Tensor) error) error {
	if read == nil {
		return errors.New("decoder.Solo.StepFunc: nil read function")
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if err := s.check("StepFunc"); err != nil {
		return err
	}
	switch n := s.seq.Len(); {
	case n != s.cache.Len():
		return fmt.Errorf("decoder.Solo.StepFunc: the sequence holds %d positions, the contiguous copy %d (stepped elsewhere since?)", n, s.cache.Len())
	case n >= s.cache.Cap():
		return fmt.Errorf("decoder.Solo.StepFunc: the contiguous cache is full (%d positions)", s.cache.Cap())
	case n >= s.seq.Cap():
		return fmt.Errorf("decoder.Solo.StepFunc: the sequence has no room reserved for position %d", n)
	}
	lt, err := s.steps.forward(s.m, s.b, s.cache, []int32{id})
	if err != nil {
		return err
	}
	if err := s.seq.Commit(1); err != nil {
		return err
	}
	return read(lt)
}

// Sync copies the keys and values of the positions stepped since NewSolo
// (or the last Sync) into the sequence's paged blocks, so that batched
// forwards can continue the sequence. It holds the model's forward lock.
func (s *Solo) Sync() error {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if err := s.check("Sync"); err != nil {
		return err
	}
	n := s.cache.Len()
	if s.synced >= n {
		return nil
	}
	for l := range s.m.Layers {
		k, err := s.cache.K[l].Slice(s.synced, n)
		if err != nil {
			return err
		}
		v, err := s.cache.V[l].Slice(s.synced, n)
		if err != nil {
			return err
		}
		if err := s.paged.StoreAt(s.b, l, s.seq, s.synced, k, v); err != nil {
			return fmt.Errorf("decoder.Solo.Sync: %w", err)
		}
	}
	s.synced = n
	return nil
}

// Close frees the graph and the contiguous cache (not the sequence),
// unless the model's Stop or Close freed them already. It holds the
// model's forward lock.
func (s *Solo) Close() {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if steps, ok := s.m.live[s.cache]; ok {
		delete(s.m.live, s.cache)
		steps.close()
		s.cache.Free()
	}
}
