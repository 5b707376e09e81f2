// Package generate is the library's batched generation: a Scheduler holds
// many requests, each with its own sampling settings, seed, stop tokens and
// limits, and serves all running ones with one batched forward per step
// (decoder.Model.ForwardBatch over a paged KV cache). Requests are admitted
// between steps when the cache has blocks for them, wait in a bounded queue
// when it has not, stream their tokens through a callback, can be cancelled
// (their blocks are freed at the next step) and retire as they finish.
// Long prompts are prefilled in chunks interleaved with other requests'
// decode steps.
//
// A request gives the tokens decoder.Model.Generate gives for it alone
// (same seed, same sampling), batched or not.
package generate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	goruntime "runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/models/kvcache"
	"github.com/flextensor-go/flextensor/runtime"
)

// Request is one generation: a prompt and how to continue it.
type Request struct {
	Prompt       []int32              // token ids, at least one
	MaxNewTokens int                  // stop after this many new tokens
	Sampling     kernels.SampleParams // Temperature 0 = greedy
	Seed         uint64               // seeds this request's sampler (as decoder.GenerateOptions.Seed)
	StopTokens   []int32              // more tokens that end generation (besides the model's EOS)
	IgnoreEOS    bool                 // keep going past EOS and stop tokens
	// OnToken, when set, sees each new token as it is chosen, on the
	// goroutine running Step. It must not block for long: the whole batch
	// waits for it.
	OnToken func(id int32)
}

// FinishReason says why a request ended.
type FinishReason string

// The finish reasons.
const (
	FinishStop      FinishReason = "stop"      // an EOS or stop token (included in the output)
	FinishLength    FinishReason = "length"    // MaxNewTokens, or the context's end
	FinishCancelled FinishReason = "cancelled" // Handle.Cancel or the Run context
	FinishError     FinishReason = "error"     // Result.Err says what
)

// Result is a finished request.
type Result struct {
	ID        int // the order of submission, from 0
	Prompt    []int32
	Generated []int32
	Finish    FinishReason
	Err       error // with FinishError
}

// Errors of Submit (wrapped with the details).
var (
	ErrQueueFull  = errors.New("generate: the wait queue is full")
	ErrTooLong    = errors.New("generate: the request does not fit")
	ErrBadRequest = errors.New("generate: bad request")
)

// Options size a Scheduler.
type Options struct {
	// MaxSeqs is the most requests running (in the KV cache) at once;
	// 0: 256.
	MaxSeqs int
	// MaxBatchTokens is the most tokens one forward takes: every running
	// request's decode step, then prompt chunks up to this many in all;
	// 0: 512.
	MaxBatchTokens int
	// MaxQueue is the most requests waiting for admission; Submit beyond it
	// is ErrQueueFull. 0: 1024.
	MaxQueue int
	// MaxContext is the most positions a request may reach (prompt plus
	// new tokens); 0: the model's max_position_embeddings.
	MaxContext int
}

// Scheduler runs requests in batches. Submit, Cancel and the counters are
// safe from any goroutine; Step and Run from one at a time.
type Scheduler struct {
	m     *decoder.Model
	b     kernels.Backend
	cache *kvcache.Paged
	opt   Options

	stepMu sync.Mutex // one Step at a time
	logits []float32  // Step's host copy of the logits

	mu      sync.Mutex // guards the lists
	nextID  int
	waiting []*Handle
	running []*Handle
}

// New makes a scheduler for m on b over cache (shaped for m:
// m.NewPagedCache).
func New(m *decoder.Model, b kernels.Backend, cache *kvcache.Paged, opt Options) (*Scheduler, error) {
	if m == nil || b == nil || cache == nil {
		return nil, errors.New("generate.New: a model, a backend and a KV cache are needed")
	}
	if opt.MaxSeqs < 0 || opt.MaxBatchTokens < 0 || opt.MaxQueue < 0 || opt.MaxContext < 0 {
		return nil, fmt.Errorf("generate.New: options %+v: none may be negative", opt)
	}
	if opt.MaxSeqs == 0 {
		opt.MaxSeqs = 256
	}
	if opt.MaxBatchTokens == 0 {
		opt.MaxBatchTokens = 512
	}
	if opt.MaxQueue == 0 {
		opt.MaxQueue = 1024
	}
	if opt.MaxContext == 0 {
		opt.MaxContext = m.Cfg.MaxPositionEmbeddings
	}
	if opt.MaxContext <= 0 {
		return nil, errors.New("generate.New: no context length (give Options.MaxContext; the config has no max_position_embeddings)")
	}
	return &Scheduler{m: m, b: b, cache: cache, opt: opt}, nil
}

// Handle is a submitted request.
type Handle struct {
	ID  int
	req Request

	cancelled atomic.Bool
	done      chan struct{}
	res       Result

	// Step's state.
	seq       *kvcache.Seq
	rng       *rand.Rand
	maxNew    int // MaxNewTokens capped by the context
	fed       int // prompt tokens forwarded so far
	gen       []int32
	positions int // positions the request reserves: prompt + maxNew − 1
}

// Done is closed when the request has finished.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Wait blocks until the request finishes and returns its result.
func (h *Handle) Wait() Result {
	<-h.done
	return h.res
}

// Submit queues r. Bad requests (an empty prompt, a token outside the
// vocabulary, negative limits, bad sampling settings) are ErrBadRequest;
// a prompt longer than the context, or a request needing more KV blocks
// than the whole cache, ErrTooLong; a full queue, ErrQueueFull. A request
// with MaxNewTokens 0 finishes at once.
func (s *Scheduler) Submit(r Request) (*Handle, error) {
	if err := s.check(r); err != nil {
		return nil, err
	}
	maxNew := min(r.MaxNewTokens, s.opt.MaxContext-len(r.Prompt)+1)
	h := &Handle{req: r, done: make(chan struct{}), maxNew: maxNew, positions: len(r.Prompt) + max(maxNew, 1) - 1}
	if max(maxNew, 1) > s.MaxNewFor(len(r.Prompt)) {
		need := s.cache.BlocksFor(h.positions)
		return nil, fmt.Errorf("%w: %d prompt + %d new tokens need %d KV blocks of %d positions; the cache has %d in all (give a larger --kv-cache)",
			ErrTooLong, len(r.Prompt), maxNew, need, s.cache.BlockSize(), s.cache.TotalBlocks())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.MaxNewTokens > 0 && len(s.waiting) >= s.opt.MaxQueue {
		return nil, fmt.Errorf("%w (%d requests wait)", ErrQueueFull, len(s.waiting))
	}
	h.ID = s.nextID
	s.nextID++
	if r.MaxNewTokens == 0 {
		h.finish(FinishLength, nil)
		return h, nil
	}
	s.waiting = append(s.waiting, h)
	return h, nil
}

// MaxNewFor is the most new tokens the whole KV cache can hold for one
// request with a prompt of promptLen tokens: Submit reserves KV blocks for
// promptLen + max(new tokens, 1) − 1 positions (the last token is never fed
// back) and refuses a request needing more blocks than the cache has. Below
// 1, the prompt alone does not fit. It does not count the context limit.
func (s *Scheduler) MaxNewFor(promptLen int) int {
	return s.cache.TotalBlocks()*s.cache.BlockSize() - promptLen + 1
}

func (s *Scheduler) check(r Request) error {
	sampErr := r.Sampling.Validate()
	switch {
	case len(r.Prompt) == 0:
		return fmt.Errorf("%w: an empty prompt", ErrBadRequest)
	case r.MaxNewTokens < 0:
		return fmt.Errorf("%w: max new tokens %d is negative", ErrBadRequest, r.MaxNewTokens)
	case sampErr != nil:
		return fmt.Errorf("%w: %w", ErrBadRequest, sampErr)
	case len(r.Prompt) > s.opt.MaxContext:
		return fmt.Errorf("%w: a prompt of %d tokens is longer than the context of %d", ErrTooLong, len(r.Prompt), s.opt.MaxContext)
	}
	for i, id := range r.Prompt {
		if id < 0 || int(id) >= s.m.Cfg.VocabSize {
			return fmt.Errorf("%w: token id %d at position %d is outside the vocabulary [0, %d)", ErrBadRequest, id, i, s.m.Cfg.VocabSize)
		}
	}
	return nil
}

// Cancel ends the request: waiting, it leaves the queue; running, it
// retires at the next Step, its KV blocks freed. Its result has
// FinishCancelled and the tokens chosen so far. Cancelling a finished
// request does nothing. Safe from any goroutine.
func (h *Handle) Cancel() { h.cancelled.Store(true) }

// Waiting is the number of requests in the queue.
func (s *Scheduler) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting)
}

// Running is the number of requests in the KV cache.
func (s *Scheduler) Running() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.running)
}

func (h *Handle) finish(reason FinishReason, err error) {
	if h.seq != nil {
		h.seq.Free()
	}
	h.res = Result{ID: h.ID, Prompt: h.req.Prompt, Generated: h.gen, Finish: reason, Err: err}
	if h.res.Generated == nil {
		h.res.Generated = []int32{}
	}
	close(h.done)
}

// Step retires cancelled requests, admits waiting ones while the cache has
// blocks for them (in order of submission: one that does not fit holds the
// ones behind it), runs one batched forward of every running request's
// next tokens (a decode step, or the next chunk of its prompt) and retires
// the requests that finished. It reports whether any request is left
// (running or waiting). A forward that fails ends the requests in it with
// FinishError and is returned.
func (s *Scheduler) Step() (bool, error) {
	s.stepMu.Lock()
	defer s.stepMu.Unlock()
	s.retireCancelled()
	s.mu.Lock()
	s.admit()
	entries, in := s.plan()
	s.mu.Unlock()
	if len(entries) == 0 {
		return s.left(), nil
	}
	V := s.m.Cfg.VocabSize
	sample := make([]bool, len(in))
	lt, err := s.m.ForwardBatch(s.b, s.cache, entries)
	var ids []int
	var errs []error
	if err == nil {
		for i, h := range in {
			if len(h.gen) == 0 && h.fed+len(entries[i].IDs) < len(h.req.Prompt) {
				continue // a prompt chunk: its logits are not needed yet
			}
			sample[i] = true
		}
		ids, errs, err = s.choose(lt, in, sample, V)
	}
	if err != nil {
		for _, h := range in {
			h.finish(FinishError, err)
		}
		s.drop(in)
		return s.left(), err
	}
	for i, h := range in {
		if len(h.gen) == 0 {
			h.fed += len(entries[i].IDs)
		}
	}
	var finished []*Handle
	for i, h := range in {
		if !sample[i] {
			continue
		}
		id, err := ids[i], errs[i]
		if err != nil {
			h.finish(FinishError, err)
			finished = append(finished, h)
			continue
		}
		tok := int32(id)
		h.gen = append(h.gen, tok)
		if h.req.OnToken != nil {
			h.req.OnToken(tok)
		}
		switch {
		case !h.req.IgnoreEOS && (slices.Contains(s.m.Cfg.EOSTokenIDs, int(tok)) || slices.Contains(h.req.StopTokens, tok)):
			h.finish(FinishStop, nil)
		case len(h.gen) >= h.maxNew:
			h.finish(FinishLength, nil)
		default:
			continue
		}
		finished = append(finished, h)
	}
	s.drop(finished)
	return s.left(), nil
}

// choose picks the next token of each in[i] with sample[i] from row i of the
// step's logits lt [len(in),V]. On a backend that takes argmaxes on the
// device (kernels.Argmaxer), greedy rows cost one int each and only the
// rows that are sampled (or have no greedy choice: a NaN or +Inf, which
// kernels.Sample then names) cross to the host: at a batch of 128 the
// whole logits are 65 MB a step. The error is the backend's; errs are the
// rows' own.
func (s *Scheduler) choose(lt *runtime.Tensor, in []*Handle, sample []bool, V int) ([]int, []error, error) {
	ids, errs := make([]int, len(in)), make([]error, len(in))
	read := slices.Clone(sample) // rows whose logits the host needs
	kinds := make([]kernels.PickPlace, len(in))
	var nGreedy, nDevice int
	for i, h := range in {
		if sample[i] {
			kinds[i] = kernels.PickPlaceFor(s.b, h.req.Sampling, V)
			switch kinds[i] {
			case kernels.PickArgmax:
				nGreedy++
			case kernels.PickSampleOnDevice:
				nDevice++
			}
		}
	}
	if nGreedy > 0 {
		arg := make([]int32, len(in))
		if err := s.b.(kernels.Argmaxer).ArgmaxRows(arg, lt); err != nil {
			return nil, nil, err
		}
		for i := range in {
			if kinds[i] == kernels.PickArgmax && arg[i] >= 0 {
				ids[i], read[i] = int(arg[i]), false
			}
		}
	}
	if nDevice > 0 {
		drawn := make([]int32, len(in))
		invT, u := make([]float32, len(in)), make([]float32, len(in))
		for i, h := range in {
			invT[i] = 1
			if kinds[i] == kernels.PickSampleOnDevice {
				invT[i], u[i] = kernels.DeviceDraw(h.req.Sampling, h.rng)
			}
		}
		if err := s.b.(kernels.DeviceSampler).SampleRows(drawn, lt, invT, u); err != nil {
			return nil, nil, err
		}
		for i := range in {
			if kinds[i] == kernels.PickSampleOnDevice && drawn[i] >= 0 {
				ids[i], read[i] = int(drawn[i]), false
			}
		}
	}
	n := 0
	for _, r := range read {
		if r {
			n++
		}
	}
	if n == 0 {
		return ids, errs, nil
	}
	s.logits = slices.Grow(s.logits[:0], len(in)*V)[:len(in)*V]
	if n == len(in) {
		if err := s.b.ReadF32(s.logits, lt); err != nil {
			return nil, nil, err
		}
	} else {
		// Runs of consecutive rows come back in one copy each.
		for lo := 0; lo < len(read); lo++ {
			if !read[lo] {
				continue
			}
			hi := lo + 1
			for hi < len(read) && read[hi] {
				hi++
			}
			rows, err := lt.Slice(lo, hi)
			if err == nil {
				err = s.b.ReadF32(s.logits[lo*V:hi*V], rows)
			}
			if err != nil {
				return nil, nil, err
			}
			lo = hi
		}
	}
	s.sampleAll(in, read, V, ids, errs)
	return ids, errs, nil
}

// sampleAll draws the next token of each in[i] with sample[i] from its row
// of s.logits into ids[i] (or errs[i]), the rows spread over the CPUs: a
// sampled row is a pass over the whole vocabulary, and a large batch has
// hundreds. Each request draws from its own generator, so the tokens do not
// depend on how the rows are spread.
func (s *Scheduler) sampleAll(in []*Handle, sample []bool, V int, ids []int, errs []error) {
	workers := min(goruntime.GOMAXPROCS(0), len(in))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(in); i += workers {
				if sample[i] {
					ids[i], errs[i] = kernels.Sample(s.logits[i*V:(i+1)*V], in[i].req.Sampling, in[i].rng)
				}
			}
		})
	}
	wg.Wait()
}

// drop takes the finished requests hs off the running list.
func (s *Scheduler) drop(hs []*Handle) {
	if len(hs) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running = slices.DeleteFunc(s.running, func(h *Handle) bool { return slices.Contains(hs, h) })
}

// left reports whether any request runs or waits.
func (s *Scheduler) left() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.running)+len(s.waiting) > 0
}

// retireCancelled finishes the cancelled requests, running or waiting.
func (s *Scheduler) retireCancelled() {
	s.mu.Lock()
	var gone []*Handle
	out := func(h *Handle) bool {
		if h.cancelled.Load() {
			gone = append(gone, h)
			return true
		}
		return false
	}
	s.waiting = slices.DeleteFunc(s.waiting, out)
	s.running = slices.DeleteFunc(s.running, out)
	s.mu.Unlock()
	for _, h := range gone {
		h.finish(FinishCancelled, nil)
	}
}

// admit moves waiting requests into the cache while there is room: a
// sequence slot and the blocks for every position the request can reach
// (so a running request never runs out of blocks). s.mu is held.
func (s *Scheduler) admit() {
	for len(s.waiting) > 0 && len(s.running) < s.opt.MaxSeqs {
		h := s.waiting[0]
		if s.cache.BlocksFor(h.positions) > s.cache.FreeBlocks() {
			return
		}
		h.seq = s.cache.NewSeq()
		if err := h.seq.Reserve(h.positions); err != nil {
			h.seq.Free()
			h.seq = nil
			return
		}
		h.rng = rand.New(rand.NewPCG(h.req.Seed, h.req.Seed^0x9e3779b97f4a7c15)) // as decoder.Generate seeds it
		s.waiting = s.waiting[1:]
		s.running = append(s.running, h)
	}
}

// plan picks this step's entries: every decoding request's last token,
// then prompt chunks within MaxBatchTokens (at least one chunk, so a step
// always progresses). s.mu is held.
func (s *Scheduler) plan() ([]decoder.BatchEntry, []*Handle) {
	var entries []decoder.BatchEntry
	var in []*Handle
	budget := s.opt.MaxBatchTokens
	for _, h := range s.running {
		if len(h.gen) > 0 {
			entries = append(entries, decoder.BatchEntry{Seq: h.seq, IDs: h.gen[len(h.gen)-1:]})
			in = append(in, h)
			budget--
		}
	}
	for _, h := range s.running {
		if len(h.gen) > 0 {
			continue
		}
		n := min(len(h.req.Prompt)-h.fed, budget)
		if n <= 0 {
			if len(entries) > 0 {
				continue
			}
			n = min(len(h.req.Prompt)-h.fed, s.opt.MaxBatchTokens)
		}
		entries = append(entries, decoder.BatchEntry{Seq: h.seq, IDs: h.req.Prompt[h.fed : h.fed+n]})
		in = append(in, h)
		budget -= n
	}
	return entries, in
}

// Run steps until no request is left, or ctx ends (then every request is
// cancelled and retired, and ctx's error returned), or a forward fails.
func (s *Scheduler) Run(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			s.CancelAll()
			s.Step() // retires them; nothing runs
			return err
		}
		more, err := s.Step()
		if err != nil {
			return err
		}
		if !more {
			return nil
		}
	}
}

// CancelAll cancels every waiting and running request.
func (s *Scheduler) CancelAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range slices.Concat(s.waiting, s.running) {
		h.Cancel()
	}
}
