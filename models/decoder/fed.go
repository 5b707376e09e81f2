package decoder

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
)

// Device-fed greedy decoding (kernels.TokenFeeder; on the CUDA backend
// unless FT_ASYNC_DECODE=0). Each one-token step is a DecodeGraph whose last op
// picks the step's token on the device and feeds it, with the next
// position, to the next replay. Generate keeps one step in flight ahead
// of the host: it enqueues the step that chooses token k+1 (which reads
// token k on the device) before it waits for token k, then delivers token
// k (OnStep, OnToken, the stop checks) while the GPU runs. When token k
// ends the generation (an EOS or stop token, OnToken's error, a done
// Context), the step already enqueued is discarded: Generate waits for it
// and truncates the cache to the length it had before it, so the tokens,
// the cache and what the caller sees are those of the synchronous loop.
// A token the device cannot choose (a NaN or +Inf in the logits, or only
// −Inf) ends the chain: the step is run again synchronously, whose pick
// reads its logits and reports what is wrong, as without the feed. A pick
// the backend lost (kernels.ErrFedLost) is got the same way, and the feed
// goes on after it.
//
// OnStep's times in this mode: forward is the host's time to enqueue the
// step after this token's (the graph launch and its bookkeeping, 0 when
// none is enqueued), pick the wait for this token's step to finish on the
// device and its read. Their sum is the time Generate spends between
// two tokens outside OnToken and OnStep; with the GPU busy the pick holds
// most of a step's device time.

// fedStep is a fed step in flight: the position it runs at and the
// ticket of its pick (kernels.TokenFeeder.PostFed).
type fedStep struct {
	pos    int
	ticket uint64
}

// noFed is no step (pos −1).
var noFed = fedStep{pos: -1}

// feeder is b's token feed when Generate may use it: greedy picks on the
// device (kernels.PickArgmax), graphs allowed, the feed switched on.
func feeder(b kernels.Backend, opt GenerateOptions, vocab int) kernels.TokenFeeder {
	tf, ok := b.(kernels.TokenFeeder)
	if !ok || opt.Eager || !tf.FeedsTokens() || kernels.PickPlaceFor(b, opt.Sampling, vocab) != kernels.PickArgmax {
		return nil
	}
	return tf
}

// generateFed is Generate's loop with the token feed (see the top of the
// file); the arguments are Generate's, checked.
func (m *Model) generateFed(b kernels.Backend, cache *KVCache, steps *stepper, prompt []int32, logits []float32,
	rng *rand.Rand, ctx context.Context, opt GenerateOptions) ([]int32, error) {
	var out []int32
	next := prompt
	pending := noFed // the fed step that chooses token len(out)
	feedOn := true
	stops := func(tok int32) bool {
		return !opt.IgnoreEOS && (slices.Contains(m.Cfg.EOSTokenIDs, int(tok)) || slices.Contains(opt.StopTokens, tok))
	}
	for len(out) < opt.MaxNewTokens {
		i := len(out)
		if err := ctx.Err(); err != nil {
			m.discardFed(steps, cache, pending)
			return out, fmt.Errorf("decoder.Generate: stopped after %d new tokens: %w", i, err)
		}
		var tok int32
		var fwd, pick time.Duration
		after := noFed // the fed step enqueued for token i+1
		more := i+1 < opt.MaxNewTokens
		if pending.pos < 0 {
			id, f, p, err := m.generateStep(b, cache, steps, next, logits, opt.Sampling, rng, i)
			if err != nil {
				return out, err
			}
			tok, fwd, pick = int32(id), f, p
			if feedOn && more && !stops(tok) {
				t0 := time.Now()
				st, ok, err := m.enqueueFed(b, cache, steps, tok, true, i)
				if err != nil {
					return out, err
				}
				after, feedOn = st, ok
				fwd += time.Since(t0)
			}
		} else {
			t0 := time.Now()
			if more {
				st, _, err := m.enqueueFed(b, cache, steps, 0, false, i)
				if err != nil {
					m.discardFed(steps, cache, pending)
					return out, err
				}
				after = st
			}
			t1 := time.Now()
			id, err := m.fedToken(steps, pending, i)
			lost := errors.Is(err, kernels.ErrFedLost)
			if err != nil && !lost {
				m.discardFed(steps, cache, after)
				return out, err
			}
			if lost || id < 0 {
				// Run the step again synchronously from the same token,
				// position and cache. Lost: the backend no longer holds
				// the pick; the step ran, so the rerun gives the same pick
				// and the feed goes on after. id < 0: no greedy choice;
				// the rerun's pick reads the logits and says why, and the
				// feed stays off.
				m.discardFed(steps, cache, after)
				if err := m.truncateFed(cache, pending.pos, i); err != nil {
					return out, err
				}
				pending, next = noFed, []int32{out[i-1]}
				feedOn = feedOn && lost
				continue
			}
			fwd, pick = t1.Sub(t0), time.Since(t1)
			tok = id
			if more && after.pos < 0 && !stops(tok) {
				// The chain broke (another caller set the step buffer, or
				// the graph must be captured again): feed tok from the host.
				t2 := time.Now()
				st, ok, err := m.enqueueFed(b, cache, steps, tok, true, i)
				if err != nil {
					return out, err
				}
				after, feedOn = st, ok
				fwd += time.Since(t2)
			}
		}
		pending = after
		if opt.OnStep != nil {
			opt.OnStep(fwd, pick)
		}
		out = append(out, tok)
		if opt.OnToken != nil {
			if err := opt.OnToken(tok); err != nil {
				m.discardFed(steps, cache, pending)
				return out, err
			}
		}
		if stops(tok) {
			m.discardFed(steps, cache, pending)
			break
		}
		next = []int32{tok}
	}
	return out, nil
}

// enqueueFed enqueues the fed step that chooses token done+1 at position
// cache.Len() and posts it, under the forward lock: it runs token id
// (set) or continues the stepper's chain (the token the previous fed step
// chose on the device). It returns the step, or noFed with ok true when
// the chain cannot continue (the caller waits for its token and feeds
// it), or noFed with ok false when the model cannot replay a graph (hooks,
// a sharded model, experts routed on the host: Generate then goes on
// without the feed).
func (m *Model) enqueueFed(b kernels.Backend, cache *KVCache, steps *stepper, id int32, set bool, done int) (fedStep, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return noFed, false, fmt.Errorf("decoder.Generate: stopped after %d new tokens: %w", done, ErrClosed)
	}
	g := steps.g
	if !set {
		if !steps.chain || g == nil || steps.feed.StepSets() != steps.sets || g.check(cache.Len()) != nil {
			return noFed, true, nil
		}
	} else {
		var ok bool
		var err error
		if g, ok, err = steps.graph(m, b, cache); err != nil || !ok {
			return noFed, false, err
		}
		if err := g.check(cache.Len()); err != nil {
			return noFed, false, err
		}
	}
	pos := cache.Len()
	if set {
		if id < 0 || int(id) >= m.Cfg.VocabSize {
			return noFed, false, fmt.Errorf("decoder.Generate: token id %d is outside the vocabulary [0, %d)", id, m.Cfg.VocabSize)
		}
		if err := g.b.SetStep([]int32{id}, pos); err != nil {
			return noFed, false, fmt.Errorf("decoder.Generate: token %d: %w", done+1, err)
		}
		steps.sets = steps.feed.StepSets()
	}
	steps.chain = false
	if _, err := g.replay(pos); err != nil {
		return noFed, false, fmt.Errorf("decoder.Generate: token %d: %w", done+1, err)
	}
	ticket, err := steps.feed.PostFed()
	if err != nil {
		return noFed, false, fmt.Errorf("decoder.Generate: token %d: %w", done+1, err)
	}
	st := fedStep{pos: pos, ticket: ticket}
	steps.pending = append(steps.pending, st)
	steps.chain = true
	return st, true, nil
}

// fedToken waits for the fed step st and returns its pick, under the
// forward lock (the backend's state is the lock's).
func (m *Model) fedToken(steps *stepper, st fedStep, done int) (int32, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed { // Stop drained the steps in flight
		return 0, fmt.Errorf("decoder.Generate: stopped after %d new tokens: %w", done, ErrClosed)
	}
	steps.pending = slices.DeleteFunc(steps.pending, func(p fedStep) bool { return p == st })
	id, err := steps.feed.FedToken(st.ticket)
	if err != nil {
		steps.chain = false
		return 0, fmt.Errorf("decoder.Generate: token %d: %w", done, err)
	}
	if id < 0 {
		steps.chain = false
	}
	return id, nil
}

// discardFed waits for the fed step st (none: noFed) and truncates the
// cache to the st.pos positions it held before the step, under the
// forward lock; after Stop (which drained the step and freed the cache)
// it does nothing. Errors are dropped: the caller returns already, with
// the tokens chosen before.
func (m *Model) discardFed(steps *stepper, cache *KVCache, st fedStep) {
	if st.pos < 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	steps.pending = slices.DeleteFunc(steps.pending, func(p fedStep) bool { return p == st })
	_, _ = steps.feed.FedToken(st.ticket)
	steps.chain = false
	_ = cache.Truncate(min(st.pos, cache.Len()))
}

// truncateFed truncates the cache to pos positions under the forward lock
// (to run the step at pos again).
func (m *Model) truncateFed(cache *KVCache, pos, done int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("decoder.Generate: stopped after %d new tokens: %w", done, ErrClosed)
	}
	return cache.Truncate(pos)
}
