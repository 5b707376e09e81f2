package decoder

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// ErrContextLength is wrapped by Generate's error when the prompt and the
// new tokens do not fit in the model's context (max_position_embeddings).
var ErrContextLength = errors.New("longer than the model's context")

// ErrClosed is wrapped by the error of Generate, Forward, ForwardBatch,
// CaptureDecode, DecodeGraph.StepAt, NewSolo, Solo.StepFunc, Solo.Sync,
// NewKVCache and NewPagedCache when the
// model was closed (Model.Stop or Model.Close; a session's Close does
// both and frees the weights).
var ErrClosed = errors.New("the model is closed (its session was closed)")

// GenerateOptions steer Generate.
type GenerateOptions struct {
	MaxNewTokens int                  // stop after this many new tokens
	Sampling     kernels.SampleParams // Temperature 0 = greedy
	Seed         uint64               // seeds the sampler
	IgnoreEOS    bool                 // keep going past end-of-sequence tokens
	StopTokens   []int32              // more tokens that end generation (a chat turn's end)
	// Context, when set, is checked before each step (the prompt's
	// forward and each new token's): once it is done, Generate returns the
	// tokens chosen so far and an error wrapping Context.Err(). A step
	// already running finishes first.
	Context context.Context
	// OnToken, when set, sees each new token as it is chosen; an error stops
	// generation and is returned. It runs outside the model's forward lock.
	OnToken func(id int32) error
	// OnStep, when set, sees each step's wall times just before OnToken:
	// the forward's call (on an asynchronous device its launches and the
	// work done on the host inside it) and the token's pick (there also
	// the wait for the forward's tail on the device, and the readback).
	// With device-fed decoding (fed.go: a backend whose
	// kernels.TokenFeeder is switched on) they are the enqueue of the
	// next step and the wait for this token's step instead. It runs
	// outside the model's forward lock; the times do not include waiting
	// for the lock.
	OnStep func(forward, pick time.Duration)
	// Eager runs every step op by op. Otherwise, on a backend that can
	// capture graphs (kernels.StepCapturer) and a model without hooks,
	// one-token steps replay a captured DecodeGraph.
	Eager bool
}

// Generate runs the prompt, then chooses up to MaxNewTokens tokens one at a
// time, stopping after an EOS token (which is included). It returns the new
// tokens. On an error after the first step it returns the tokens chosen
// before the error together with the error.
//
// Greedy decoding on a backend whose token feed is switched on
// (kernels.TokenFeeder; the CUDA backend unless FT_ASYNC_DECODE=0) keeps one
// step in flight ahead of the host (fed.go); the tokens, the cache and the
// callbacks are those of the step-by-step loop.
//
// Generate owns its KV cache (made at the start, freed at the end). Each
// step (a forward and its token's pick) holds the model's forward lock
// (see Model), so several goroutines may call Generate on one model: their
// steps interleave, one at a time, and each call returns the tokens it
// would return alone. To serve many requests in one batched forward, use
// models/generate.Scheduler. A Stop or Close of the model (a session's
// Close) while Generate runs waits for the step in progress; Generate then
// returns its tokens so far and an error wrapping ErrClosed.
//
// Bad arguments are errors naming what is wrong: a nil backend, a closed
// model (ErrClosed), an empty prompt, a negative MaxNewTokens, sampling
// values kernels.SampleParams.Validate refuses, too many positions
// (ErrContextLength). A done Context stops it (see GenerateOptions).
func (m *Model) Generate(b kernels.Backend, prompt []int32, opt GenerateOptions) ([]int32, error) {
	switch {
	case m == nil:
		return nil, errors.New("decoder.Generate: nil model")
	case b == nil:
		return nil, errors.New("decoder.Generate: nil backend (give the session's Backend)")
	}
	if err := opt.Sampling.Validate(); err != nil {
		return nil, fmt.Errorf("decoder.Generate: %w", err)
	}
	if len(prompt) == 0 {
		return nil, errors.New("decoder.Generate: empty prompt")
	}
	if opt.MaxNewTokens < 0 {
		return nil, fmt.Errorf("decoder.Generate: max new tokens %d is negative", opt.MaxNewTokens)
	}
	if n := len(prompt) + opt.MaxNewTokens; n > m.Cfg.MaxPositionEmbeddings {
		return nil, fmt.Errorf("decoder.Generate: %d prompt tokens + %d new tokens = %d positions exceed the model's context of %d (max_position_embeddings): %w",
			len(prompt), opt.MaxNewTokens, n, m.Cfg.MaxPositionEmbeddings, ErrContextLength)
	}
	ctx := opt.Context
	if ctx == nil {
		ctx = context.Background()
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("decoder.Generate: %w", err)
	}
	steps := &stepper{eager: opt.Eager, feed: feeder(b, opt, m.Cfg.VocabSize)}
	cache, err := m.generateCache(b, len(prompt)+max(opt.MaxNewTokens, 1), steps)
	if err != nil {
		return nil, err
	}
	defer m.endGenerate(cache)
	rng := rand.New(rand.NewPCG(opt.Seed, opt.Seed^0x9e3779b97f4a7c15))
	logits := make([]float32, m.Cfg.VocabSize)
	if steps.feed != nil {
		return m.generateFed(b, cache, steps, prompt, logits, rng, ctx, opt)
	}
	var out []int32
	next := prompt
	for len(out) < opt.MaxNewTokens {
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("decoder.Generate: stopped after %d new tokens: %w", len(out), err)
		}
		id, fwd, pick, err := m.generateStep(b, cache, steps, next, logits, opt.Sampling, rng, len(out))
		if err != nil {
			return out, err
		}
		if opt.OnStep != nil {
			opt.OnStep(fwd, pick)
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

// generateEnded, when set (tests), sees the length of a Generate's cache
// just before it is freed.
var generateEnded atomic.Pointer[func(cacheLen int)]

// generateCache makes a Generate's KV cache under the forward lock and
// records it as live with its stepper, so that Stop frees both.
func (m *Model) generateCache(b kernels.Backend, capacity int, steps *stepper) (*KVCache, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("decoder.Generate: %w", ErrClosed)
	}
	cache, err := m.newKVCache(b, capacity)
	if err != nil {
		return nil, err
	}
	if m.live == nil {
		m.live = map[*KVCache]*stepper{}
	}
	m.live[cache] = steps
	return cache, nil
}

// endGenerate frees a Generate's graph and cache, unless Stop freed them
// already.
func (m *Model) endGenerate(cache *KVCache) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if steps, ok := m.live[cache]; ok {
		delete(m.live, cache)
		steps.close()
		if f := generateEnded.Load(); f != nil {
			(*f)(cache.Len())
		}
		cache.Free()
	}
}

// generateStep is one step of Generate under the forward lock: the
// forward of next and the pick of its token (the logits are the model's
// workspace, which another goroutine's forward would overwrite). It
// returns the token and the wall times of the forward and the pick.
func (m *Model) generateStep(b kernels.Backend, cache *KVCache, steps *stepper, next []int32, logits []float32,
	p kernels.SampleParams, rng *rand.Rand, done int) (int, time.Duration, time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, 0, 0, fmt.Errorf("decoder.Generate: stopped after %d new tokens: %w", done, ErrClosed)
	}
	t0 := time.Now()
	lt, err := steps.forward(m, b, cache, next)
	if err != nil {
		return 0, 0, 0, err
	}
	t1 := time.Now()
	id, err := pickToken(b, lt, logits, p, rng)
	if err != nil {
		for _, v := range logits {
			if v != v || v > math.MaxFloat32 {
				return 0, 0, 0, fmt.Errorf("%w at generated token %d: %v", ErrNonFinite, done, err)
			}
		}
		return 0, 0, 0, err
	}
	return id, t1.Sub(t0), time.Since(t1), nil
}

// pickToken chooses the next token from the logits lt [1,V]. Greedy and
// temperature-only choices on a backend that makes them on the device
// (kernels.PickPlaceFor) read back one int instead of V logits; a row the
// device cannot choose from (a NaN or +Inf) is read back and goes through
// kernels.Sample, which says what is wrong.
func pickToken(b kernels.Backend, lt *runtime.Tensor, logits []float32, p kernels.SampleParams, rng *rand.Rand) (int, error) {
	if lt.NumElements() == len(logits) {
		var id [1]int32
		switch kernels.PickPlaceFor(b, p, len(logits)) {
		case kernels.PickArgmax:
			if err := b.(kernels.Argmaxer).ArgmaxRows(id[:], lt); err != nil {
				return 0, err
			}
			if id[0] >= 0 {
				return int(id[0]), nil
			}
		case kernels.PickSampleOnDevice:
			invT, u := kernels.DeviceDraw(p, rng)
			if err := b.(kernels.DeviceSampler).SampleRows(id[:], lt, []float32{invT}, []float32{u}); err != nil {
				return 0, err
			}
			if id[0] >= 0 {
				return int(id[0]), nil
			}
		}
	}
	if err := b.ReadF32(logits, lt); err != nil {
		return 0, err
	}
	return kernels.Sample(logits, p, rng)
}
