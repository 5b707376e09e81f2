// Package generate is the library's batched generation: a Scheduler holds
// many requests, each with its own sampling settings, seed, stop tokens and
// limits, and serves all running ones with one batched forward per step
// (decoder.Model.ForwardBatch over a paged KV cache). Requests are admitted
// between steps when the cache has blocks for their prompts, wait in a
// bounded queue when it has not, stream their tokens through a callback,
// can be cancelled (their blocks are freed at the next step) and retire as
// they finish. Long prompts are prefilled in chunks interleaved with other
// requests' decode steps.
//
// KV blocks are taken lazily: admission takes the blocks of a request's
// prompt (and only when 1% of the cache's blocks, at least one, stay free
// beside them for the running requests to grow into, unless nothing else
// runs), and each
// step takes, before its forward, the blocks that forward's decode
// positions need, the oldest request first. When the pool runs short the
// most recently admitted requests are preempted (never the oldest, which
// the whole cache always holds: Submit refuses a request whose whole reach
// does not fit) and go back to the front of the queue. With a swap area
// (Options.SwapBytes) a decoding request is swapped out: its KV blocks'
// keys and values are copied to host memory (kvcache.Swap) and the blocks
// freed; it is readmitted when blocks for all its positions are free
// (beside the watermark), swapped in, perhaps into other blocks, with the
// very bits it had, and decodes on. Without room in the swap area (or
// without one, or while still prefilling) it is recomputed: its blocks
// are freed and, readmitted, it prefills its prompt and the tokens
// generated so far again (all but the last, the next decode input). Either
// way it continues with the same sampler, so its tokens neither change
// nor repeat. Scheduler.Preemptions counts every preemption,
// Scheduler.Swaps the ones swapped out (the rest were recomputed).
//
// A request gives the tokens decoder.Model.Generate gives for it alone
// (same seed, same sampling), batched or not, preempted or not (up to
// rounding, for a recomputed preemption only: a prefilled position's keys
// and values can differ in the last bits from the ones a decode step
// stored, which can change a near-tie; a swapped one gets its own back).
//
// A request decoding alone (one running, nothing waiting that could be
// admitted) can step through a captured graph instead of a batched forward
// over the paged blocks (Options.SoloGraph, FT_SCHED_GRAPH; on by default
// since s14b measured 4.13 against 4.37-4.41 ms a token on the H200): the scheduler's batch-1 steps then cost what
// decoder.Model.Generate's do, one graph replay instead of some two hundred
// launches. Of the two ways to get there, this package takes the one that
// reuses the decoder's DecodeGraph as it is ("solo mode",
// decoder.Model.NewSolo) rather than making the paged batched forward
// capturable (its block table, lengths and attention split count would have
// to live in fixed device buffers, a change to the paged kernels and every
// batched op for one case): on entering solo mode the request's keys and
// values are copied from its paged blocks into a contiguous cache (see
// below for its size), and a one-token step is captured over
// it; each solo step commits its position in the paged sequence too, whose
// blocks are still reserved step by step as for a batched forward (so the
// cache's accounting, the watermark and preemption see what they would see
// without it), and when another request is admitted the positions stepped
// alone are copied back into the paged blocks before the batched forward, so
// batching resumes exactly. A request that finishes or is cancelled alone
// has nothing to copy. Entering costs the copy of the whole context (2 ×
// Layers StoreKV launches for each run of physically consecutive KV
// blocks: a few a layer for a sequence whose blocks were taken in order,
// one a block at worst), a device allocation and a capture plus
// instantiate of the step, all of it but the capture growing with the
// context, while a replayed step saves about 0.25 ms on the H200 (s14b).
// Measured with the entry counted in (s14c): after an 8,000-id prompt, 128
// tokens took 4.58 against 4.96 ms a token batched; the thresholds below
// are not tuned. So solo mode is entered only by a request
// with at least max(soloMinTokens, Len()/soloContextShare) tokens left. A
// request whose entry fails for another reason than decoder.ErrNoGraph
// (too little device memory for the contiguous cache, a failed capture) runs
// batched to its end, never trying again; Scheduler.SoloFailures counts
// those and SoloErr keeps the first. Steps on a backend or model that cannot
// replay graphs (decoder.ErrNoGraph) run batched too. Scheduler.GraphSteps
// counts the solo steps.
//
// The contiguous cache is device memory beside the paged cache (outside
// --kv-cache): min(reach, max(2 × Len(), Len() + soloChunk)) positions
// (reach: prompt plus new tokens), every layer's keys and values, 128 KiB
// a position on Llama-3-8B in BF16. When it is full before the request
// ends, the positions stepped in it are copied back, it is freed and solo
// mode is entered again with twice the room, up to the reach (when the
// request still has the tokens left that entry asks; else it ends
// batched). So the cache holds at most about twice the context, or the
// context plus soloChunk, not room for a whole MaxNewTokens that an EOS
// may cut short. A solo step runs the ops of Generate's decode steps (contiguous attention, not
// the paged one; the prompt's keys and values still come from the batched
// prefill), so on a GPU its tokens can part from the batched path's at
// near-ties, as batched and lone runs can; on the CPU they are the same.
// The contiguous cache is the model's (like a Generate's): a scheduler left
// in solo mode (its caller no longer calling Step) holds it until the
// request ends at a later Step, or the model's Stop or Close frees it.
//
// Each step's forward and the choice of its tokens hold the model's
// forward lock (decoder.Model: one forward at a time), so Generate calls
// on the same model from other goroutines are safe; they wait for the
// step. The paged cache a Scheduler runs over is the caller's (made with
// decoder.Model.NewPagedCache): stop the scheduler and close the cache
// (kvcache.Paged.Close) before the model's session, whose Close otherwise
// returns an error naming the device memory still held. After the
// session's Close, a step fails with an error wrapping decoder.ErrClosed.
package generate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
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
	ID        int          // the order of submission, from 0
	Prompt    []int32      // the request's prompt
	Generated []int32      // the new tokens, in order (empty, not nil, when none)
	Finish    FinishReason // why it ended
	Err       error        // with FinishError
}

// Errors of Submit (wrapped with the details).
var (
	ErrQueueFull  = errors.New("generate: the wait queue is full")
	ErrTooLong    = errors.New("generate: the request does not fit")
	ErrBadRequest = errors.New("generate: bad request")
	// ErrCacheTooSmall is the kind of ErrTooLong that a larger KV cache
	// (more blocks in m.NewPagedCache) would admit: the request fits the
	// context but not the whole cache. It wraps ErrTooLong.
	ErrCacheTooSmall = fmt.Errorf("%w: the KV cache is too small", ErrTooLong)
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
	// is ErrQueueFull (preempted requests go back to the queue regardless).
	// 0: 1024.
	MaxQueue int
	// MaxContext is the most positions a request may reach (prompt plus
	// new tokens); 0: the model's max_position_embeddings. New refuses a
	// MaxContext beyond max_position_embeddings when the config has one
	// (positions past the trained context give wrong answers).
	MaxContext int
	// SwapBytes is the most host memory (pinned on a GPU, taken as needed)
	// that preempted requests' KV blocks are swapped out to instead of
	// being recomputed (see the package doc); 0: none, every preemption
	// recomputes. The swap area is the cache's: its Close frees it.
	SwapBytes int64
	// SoloGraph says whether a request decoding alone steps through a
	// captured graph (see the package doc); SoloGraphEnv, the zero value,
	// leaves it to FT_SCHED_GRAPH.
	SoloGraph SoloGraphMode
}

// SoloGraphMode is Options.SoloGraph.
type SoloGraphMode int

// The solo graph modes.
const (
	SoloGraphEnv SoloGraphMode = iota // FT_SCHED_GRAPH: "0" off; "1" or unset on
	SoloGraphOff                      // every step a batched forward
	SoloGraphOn                       // a lone decoding request replays a captured graph
)

// SchedGraphEnv is the environment variable that switches solo graph steps
// on ("1"; unset: on) or off ("0") for schedulers whose Options.SoloGraph
// is SoloGraphEnv. New refuses any other value.
const SchedGraphEnv = "FT_SCHED_GRAPH"

// soloGraphDefault is the mode of an unset FT_SCHED_GRAPH.
const soloGraphDefault = true

// SoloGraphFromEnv parses FT_SCHED_GRAPH: whether solo graph steps are on;
// a value other than "", "0" or "1" is an error naming the variable.
func SoloGraphFromEnv() (bool, error) {
	switch v := os.Getenv(SchedGraphEnv); v {
	case "":
		return soloGraphDefault, nil
	case "0":
		return false, nil
	case "1":
		return true, nil
	default:
		return false, fmt.Errorf("%s=%q: want 0 (batched forwards only) or 1 (a request decoding alone replays a captured graph)", SchedGraphEnv, v)
	}
}

// A request enters solo mode only with at least
// max(soloMinTokens, Len()/soloContextShare) tokens left (Len(): the
// positions its KV cache holds): entering copies its keys and values
// (launches that grow with the context), allocates the contiguous cache
// and captures a step, which the replays' savings (about 0.25 ms a token
// on the H200, s14b) must pay back; at a context of 8,192 it takes 128
// tokens left. Neither number is tuned on the GPU yet.
const (
	soloMinTokens    = 16
	soloContextShare = 64
)

// soloChunk is the least room past the context a solo cache is made with:
// it takes min(reach, max(2 × Len(), Len()+soloChunk)) positions (see the
// package doc).
var soloChunk = 256 // a variable for the tests

// soloCapacity is the contiguous cache's size for a request at context n
// that reaches reach positions (reach > n).
func soloCapacity(n, reach int) int {
	return min(reach, max(2*n, n+soloChunk))
}

// Scheduler runs requests in batches. Submit, Cancel, the counters and
// Close are safe from any goroutine (Close waits for a Step in progress;
// then Submit, Step and Run return ErrSchedulerClosed); Step and Run from
// one at a time.
type Scheduler struct {
	m     *decoder.Model
	b     kernels.Backend
	cache *kvcache.Paged
	opt   Options

	stepMu sync.Mutex // one Step at a time
	logits []float32  // Step's host copy of the logits

	mu      sync.Mutex // guards the lists and closed
	closed  bool       // Close has begun
	nextID  int
	waiting []*Handle // in order of submission (preempted ones at the front)
	running []*Handle // in order of admission, which is submission order

	swap         *kvcache.Swap // nil: no swapping
	preemptions  atomic.Int64
	swaps        atomic.Int64
	swapFailures atomic.Int64
	swapErr      atomic.Pointer[error] // the first swap-out failure, not counting a full area
	soloFailures atomic.Int64
	soloErr      atomic.Pointer[error] // the first failed solo entry, not counting ErrNoGraph

	// Solo mode (see the package doc; Step's goroutine only): soloOn is
	// the option; solo steps soloH, the lone running request, while set;
	// noGraph: NewSolo said the model cannot replay graphs here.
	soloOn     bool
	noGraph    bool
	solo       *decoder.Solo
	soloH      *Handle
	graphSteps atomic.Int64

	closeOnce sync.Once // Close's work, run once; later calls wait for it
}

// New makes a scheduler for m on b over cache (shaped for m:
// m.NewPagedCache; the caller closes it, after the scheduler's last step
// and before the model's session). A Scheduler must be made with New: a
// zero one refuses every request.
func New(m *decoder.Model, b kernels.Backend, cache *kvcache.Paged, opt Options) (*Scheduler, error) {
	if m == nil || b == nil || cache == nil {
		return nil, errors.New("generate.New: a model, a backend and a KV cache are needed")
	}
	if opt.MaxSeqs < 0 || opt.MaxBatchTokens < 0 || opt.MaxQueue < 0 || opt.MaxContext < 0 || opt.SwapBytes < 0 {
		return nil, fmt.Errorf("generate.New: options %+v: none may be negative", opt)
	}
	var soloOn bool
	switch opt.SoloGraph {
	case SoloGraphEnv:
		on, err := SoloGraphFromEnv()
		if err != nil {
			return nil, fmt.Errorf("generate.New: %w", err)
		}
		soloOn = on
	case SoloGraphOff:
	case SoloGraphOn:
		soloOn = true
	default:
		return nil, fmt.Errorf("generate.New: Options.SoloGraph %d is not a SoloGraphMode", opt.SoloGraph)
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
	if trained := m.Cfg.MaxPositionEmbeddings; trained > 0 && opt.MaxContext > trained {
		return nil, fmt.Errorf("generate.New: Options.MaxContext %d exceeds the model's context (max_position_embeddings %d): positions past it give wrong answers",
			opt.MaxContext, trained)
	}
	if opt.MaxContext == 0 {
		opt.MaxContext = m.Cfg.MaxPositionEmbeddings
	}
	if opt.MaxContext <= 0 {
		return nil, errors.New("generate.New: no context length (give Options.MaxContext; the config has no max_position_embeddings)")
	}
	s := &Scheduler{m: m, b: b, cache: cache, opt: opt, soloOn: soloOn}
	if opt.SwapBytes > 0 {
		sw, err := cache.NewSwap(opt.SwapBytes)
		if err != nil {
			return nil, fmt.Errorf("generate.New: %w", err)
		}
		s.swap = sw
	}
	return s, nil
}

// Handle is a submitted request.
type Handle struct {
	ID  int // the order of submission, from 0 (as Result.ID)
	req Request

	cancelled atomic.Bool
	done      chan struct{}
	res       Result

	// Step's state.
	seq    *kvcache.Seq // nil while waiting, or swapped out after a preemption
	rng    *rand.Rand   // made at the first admission, kept over preemptions
	maxNew int          // MaxNewTokens capped by the context
	gen    []int32
	noSolo bool // entering solo mode failed for it: it stays batched to its end
	// replay is what a preempted request prefills again: its prompt and
	// all its generated tokens but the last; nil before a preemption.
	replay []int32
}

// Done is closed when the request has finished.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Wait blocks until the request finishes and returns its result.
func (h *Handle) Wait() Result {
	<-h.done
	return h.res
}

// Submit queues r. Bad requests (an empty prompt, a prompt or stop token
// outside the vocabulary, negative limits, bad sampling settings) are
// ErrBadRequest; a prompt longer than the context, ErrTooLong; a request
// needing more KV blocks than the whole cache, ErrTooLong and
// ErrCacheTooSmall; a full queue, ErrQueueFull. A request with
// MaxNewTokens 0 finishes at once. On a Scheduler not made with New it is
// an error.
func (s *Scheduler) Submit(r Request) (*Handle, error) {
	if s == nil || s.m == nil {
		return nil, errNotNew
	}
	if err := s.check(r); err != nil {
		return nil, err
	}
	maxNew := min(r.MaxNewTokens, s.opt.MaxContext-len(r.Prompt)+1)
	h := &Handle{req: r, done: make(chan struct{}), maxNew: maxNew}
	if max(maxNew, 1) > s.MaxNewFor(len(r.Prompt)) {
		need := s.cache.BlocksFor(len(r.Prompt) + max(maxNew, 1) - 1)
		return nil, fmt.Errorf("%w: %d prompt + %d new tokens need %d KV blocks of %d positions; the cache has %d in all",
			ErrCacheTooSmall, len(r.Prompt), maxNew, need, s.cache.BlockSize(), s.cache.TotalBlocks())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrSchedulerClosed
	}
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
// request with a prompt of promptLen tokens: a request reaches promptLen +
// max(new tokens, 1) − 1 positions (the last token is never fed back), and
// Submit refuses one whose reach needs more blocks than the whole cache has
// (blocks are taken as the request grows, but it must be able to finish
// alone). Below 1, the prompt alone does not fit. It does not count the
// context limit. On a Scheduler not made with New it is 0.
func (s *Scheduler) MaxNewFor(promptLen int) int {
	if s.cache == nil {
		return 0
	}
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
	for i, id := range r.StopTokens {
		if id < 0 || int(id) >= s.m.Cfg.VocabSize {
			return fmt.Errorf("%w: stop token %d (StopTokens[%d]) is outside the vocabulary [0, %d)", ErrBadRequest, id, i, s.m.Cfg.VocabSize)
		}
	}
	return nil
}

// errNotNew is what a Scheduler not made with New answers.
var errNotNew = errors.New("generate: the Scheduler was not made with generate.New")

// ErrSchedulerClosed is what Submit, Step and Run return after Close.
var ErrSchedulerClosed = errors.New("generate: the scheduler is closed")

// Cancel ends the request: waiting (also after a preemption), it leaves the
// queue; running, it retires at the next Step, its KV blocks freed. Its
// result has FinishCancelled and the tokens chosen so far. Cancelling a
// finished request does nothing. Safe from any goroutine.
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

// Preemptions is the number of times a running request was preempted
// (its KV blocks freed and it put back at the front of the queue, to be
// swapped in or prefill again when readmitted) because the cache ran out of
// blocks for the running requests' next positions, since the scheduler was
// made. Swaps are among them.
func (s *Scheduler) Preemptions() int64 { return s.preemptions.Load() }

// Swaps is the number of preemptions that swapped the request's KV blocks
// out to host memory (Options.SwapBytes) rather than dropping them to be
// recomputed: Preemptions − Swaps were recomputed.
func (s *Scheduler) Swaps() int64 { return s.swaps.Load() }

// SwapFailures is the number of swap-outs that failed for a reason other
// than a full swap area (kvcache.ErrSwapFull): host memory that could not
// be taken, a failed copy. Those preemptions were recomputed instead (the
// tokens are not affected); SwapErr says why the first one failed.
func (s *Scheduler) SwapFailures() int64 { return s.swapFailures.Load() }

// SwapErr is the error of the first swap-out counted by SwapFailures, or
// nil.
func (s *Scheduler) SwapErr() error {
	if p := s.swapErr.Load(); p != nil {
		return *p
	}
	return nil
}

// SoloFailures is the number of requests whose entry into solo mode (see
// the package doc) failed for a reason other than decoder.ErrNoGraph: too
// little device memory for the contiguous cache, a failed capture. Those
// requests ran batched to their end (the tokens are not affected); SoloErr
// says why the first one failed.
func (s *Scheduler) SoloFailures() int64 {
	if s == nil {
		return 0
	}
	return s.soloFailures.Load()
}

// SoloErr is the error of the first solo entry counted by SoloFailures, or
// nil.
func (s *Scheduler) SoloErr() error {
	if s == nil {
		return nil
	}
	if p := s.soloErr.Load(); p != nil {
		return *p
	}
	return nil
}

// GraphSteps is the number of steps that ran through a captured graph (a
// request decoding alone in solo mode, see the package doc) since the
// scheduler was made.
func (s *Scheduler) GraphSteps() int64 {
	if s == nil {
		return 0
	}
	return s.graphSteps.Load()
}

// SwapUsedBlocks is the number of KV blocks held swapped out now (0
// without a swap area).
func (s *Scheduler) SwapUsedBlocks() int {
	if s == nil || s.swap == nil {
		return 0
	}
	return s.swap.UsedBlocks()
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

// Step retires cancelled requests; takes the KV blocks of every decoding
// request's next position, oldest first, preempting the most recently
// admitted requests while the cache is short (see the package doc); in a
// step that preempted none, admits waiting requests while the cache has
// blocks for their prompts (in order of submission: one that does not fit
// holds the ones behind it); runs one batched forward of every running
// request's next tokens (a decode step, or the next chunk of its prompt;
// in solo mode, see the package doc, the lone request's step through its
// captured graph; when another request was admitted, solo mode ends first,
// its positions copied back, and the step is batched) and retires the
// requests that finished. It reports whether any request is left (running
// or waiting). A forward that fails ends the requests in it with
// FinishError and is returned; a failed copy back at the end of solo mode
// ends the solo request with FinishError (its Result.Err says why) and is
// not returned: the step goes on with the others. After Close it returns
// ErrSchedulerClosed. On a Scheduler not made with New it is an error.
func (s *Scheduler) Step() (bool, error) {
	if s == nil || s.m == nil {
		return false, errNotNew
	}
	s.stepMu.Lock()
	defer s.stepMu.Unlock()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return false, ErrSchedulerClosed
	}
	s.retireCancelled()
	s.mu.Lock()
	preempted, failed, failErrs := s.grow()
	if !preempted {
		s.admit()
	}
	var alone *Handle
	if len(s.running) == 1 {
		alone = s.running[0]
	}
	s.mu.Unlock()
	for i, h := range failed {
		h.finish(FinishError, failErrs[i])
	}
	if s.solo != nil && (s.soloH != alone || s.soloH.seq.Len() >= s.solo.Cap()) {
		// Another request runs beside it, or the contiguous cache is full
		// (enterSolo below enters again with twice the room).
		s.leaveSolo()
	}
	s.mu.Lock()
	entries, in, sample := s.plan()
	s.mu.Unlock()
	if len(entries) == 0 {
		return s.left(), nil
	}
	if s.solo == nil && alone != nil && len(in) == 1 && in[0] == alone && alone.decoding() {
		s.enterSolo(alone)
	}
	V := s.m.Cfg.VocabSize
	var ids []int
	var errs []error
	// The tokens are chosen under the model's forward lock: another
	// goroutine's forward on the model would overwrite the logits.
	read := func(lt *runtime.Tensor) error {
		var err error
		ids, errs, err = s.choose(lt, in, sample, V)
		return err
	}
	var err error
	if s.solo != nil {
		err = s.solo.StepFunc(entries[0].IDs[0], read)
		if err == nil {
			s.graphSteps.Add(1)
		}
	} else {
		err = s.m.ForwardBatchFunc(s.b, s.cache, entries, read)
	}
	if err != nil {
		for _, h := range in {
			h.finish(FinishError, err)
		}
		s.drop(in)
		s.closeSolo()
		return s.left(), err
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
	if s.solo != nil && slices.Contains(finished, s.soloH) {
		s.closeSolo() // nothing to copy back
	}
	return s.left(), nil
}

// enterSolo starts solo mode for h, the lone running request about to
// decode, when the option is on, it has enough tokens left for the entry to
// pay (soloMinTokens, soloContextShare) and the model can replay a graph;
// the contiguous cache takes soloCapacity positions. When NewSolo fails, h
// stays batched to its end, counted in SoloFailures (and every request,
// when the model cannot replay graphs at all: ErrNoGraph, not counted).
func (s *Scheduler) enterSolo(h *Handle) {
	n := h.seq.Len()
	if !s.soloOn || s.noGraph || h.noSolo || h.maxNew-len(h.gen) < max(soloMinTokens, n/soloContextShare) {
		return
	}
	reach := len(h.req.Prompt) + h.maxNew - 1 // the last token is never fed back
	capacity := soloCapacity(n, reach)
	solo, err := s.m.NewSolo(s.b, h.seq, capacity)
	if err != nil {
		h.noSolo = true
		if errors.Is(err, decoder.ErrNoGraph) {
			s.noGraph = true
			return
		}
		err = fmt.Errorf("generate: request %d at position %d, a solo cache of %d positions: %w", h.ID, n, capacity, err)
		s.soloFailures.Add(1)
		s.soloErr.CompareAndSwap(nil, &err)
		return
	}
	s.solo, s.soloH = solo, h
}

// leaveSolo ends solo mode: its request, when still live, gets the
// positions stepped alone copied back into its paged blocks (a copy that
// fails ends it with FinishError).
func (s *Scheduler) leaveSolo() {
	h, solo := s.soloH, s.solo
	defer s.closeSolo()
	if h.seq == nil || h.seq.Freed() {
		return
	}
	if err := solo.Sync(); err != nil {
		s.mu.Lock()
		s.running = slices.DeleteFunc(s.running, func(x *Handle) bool { return x == h })
		s.mu.Unlock()
		h.finish(FinishError, err)
	}
}

// closeSolo frees the solo graph and its cache, if any.
func (s *Scheduler) closeSolo() {
	if s.solo != nil {
		s.solo.Close()
	}
	s.solo, s.soloH = nil, nil
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

// admissionWatermarkPercent is the share of the cache's blocks (at least
// one block) that admission leaves free while other requests run: the
// running requests take a block every BlockSize decode steps each, and a
// request admitted into the last free blocks would be preempted at the
// next block boundary, its prefill wasted. Nothing running, a request is
// admitted into the whole cache.
const admissionWatermarkPercent = 1

// prefill is what the request prefills: its prompt or, readmitted after a
// preemption, its replay.
func (h *Handle) prefill() []int32 {
	if h.replay != nil {
		return h.replay
	}
	return h.req.Prompt
}

// decoding reports whether the running request's prefill is all in the
// cache, so its next forward feeds back its last token.
func (h *Handle) decoding() bool { return len(h.gen) > 0 && h.seq.Len() >= len(h.prefill()) }

// grow takes the KV blocks of every decoding request's next position (the
// one this step's forward writes), in order of admission. When the pool is
// short it preempts the most recently admitted request (perhaps the one
// growing) and tries again; the oldest is never preempted. It reports
// whether it preempted any, and the requests that cannot grow even alone
// (only when the cache is used by more than this scheduler, or a bug),
// taken off the list, with their errors, for the caller to finish. s.mu is
// held.
func (s *Scheduler) grow() (preempted bool, failed []*Handle, errs []error) {
	for i := 0; i < len(s.running); i++ {
		h := s.running[i]
		if !h.decoding() {
			continue // a prefill: admission took its blocks
		}
		for {
			err := h.seq.Reserve(1)
			if err == nil {
				break
			}
			if errors.Is(err, kvcache.ErrOutOfBlocks) && len(s.running) > 1 {
				victim := s.running[len(s.running)-1] // not running[0]: i ≤ the last
				if victim == s.soloH {
					// The solo request's paged blocks hold garbage past
					// the positions synced (see the package doc); swapping
					// them out or recomputing from them would be wrong.
					// It cannot happen (the invariant at preempt); fail
					// loudly if a change ever breaks it.
					s.running = s.running[:len(s.running)-1]
					failed = append(failed, victim)
					errs = append(errs, fmt.Errorf("generate: internal error: request %d would be preempted while it steps alone (solo mode), its KV blocks behind its %d positions", victim.ID, victim.seq.Len()))
					if victim == h {
						break
					}
					continue
				}
				s.preempt(victim)
				preempted = true
				if victim == h {
					break
				}
				continue
			}
			failed = append(failed, h)
			errs = append(errs, fmt.Errorf("generate: request %d at position %d: %w", h.ID, h.seq.Len(), err))
			s.running = slices.Delete(s.running, i, i+1)
			i--
			break
		}
	}
	return preempted, failed, errs
}

// preempt puts the running request h at the front of the queue: a
// decoding one is swapped out when the swap area has room, else its blocks
// are freed and it keeps the tokens to prefill again when it is readmitted
// (its generated tokens and sampler are kept either way). h is the last of
// s.running. s.mu is held.
//
// Invariant: h is never the solo request (s.soloH), whose paged blocks are
// not written while it steps alone (kvcache.Seq.Len() counts positions
// only the solo cache holds until Solo.Sync). Only the order of Step keeps
// it: solo mode needs running == [soloH] at plan time, grow runs on a
// subset of that before admit and preempts only with more than one
// running, and leaveSolo copies the positions back before any batched
// forward. grow fails the request with an internal error rather than
// preempt it if a change breaks that.
func (s *Scheduler) preempt(h *Handle) {
	s.running = s.running[:len(s.running)-1]
	s.waiting = slices.Insert(s.waiting, 0, h)
	s.preemptions.Add(1)
	if s.swap != nil && h.decoding() {
		err := s.swap.Out(h.seq)
		if err == nil {
			s.swaps.Add(1)
			return
		}
		if !errors.Is(err, kvcache.ErrSwapFull) {
			s.swapFailures.Add(1)
			s.swapErr.CompareAndSwap(nil, &err)
		}
	}
	s.recompute(h) // no swap area, a prefill, a full swap area or a failed copy
}

// recompute frees h's blocks (or swapped-out blocks) and sets what it
// prefills when readmitted: its prompt and all its generated tokens but the
// last.
func (s *Scheduler) recompute(h *Handle) {
	h.seq.Free()
	h.seq = nil
	h.replay = nil
	if len(h.gen) > 0 {
		h.replay = slices.Concat(h.req.Prompt, h.gen[:len(h.gen)-1])
	}
}

// admit moves waiting requests into the cache while there is room: a
// sequence slot and the blocks of what the request prefills (its prompt,
// or its replay after a preemption), or of all its positions when it is
// swapped out, beside the watermark (admissionWatermarkPercent) when other
// requests run. s.mu is held.
func (s *Scheduler) admit() {
	watermark := max(1, s.cache.TotalBlocks()*admissionWatermarkPercent/100)
	for len(s.waiting) > 0 && len(s.running) < s.opt.MaxSeqs {
		h := s.waiting[0]
		if h.seq != nil && h.seq.Swapped() {
			// Its blocks and the one of the position this step decodes
			// (grow ran before admission).
			need := s.cache.BlocksFor(h.seq.Len() + 1)
			if len(s.running) > 0 {
				need += watermark
			}
			if need > s.cache.FreeBlocks() {
				return
			}
			err := s.swap.In(h.seq)
			if errors.Is(err, kvcache.ErrOutOfBlocks) {
				return // the cache is shared: wait
			}
			if err == nil {
				err = h.seq.Reserve(1)
			}
			if err == nil {
				s.waiting = s.waiting[1:]
				s.running = append(s.running, h)
				continue
			}
			s.recompute(h) // a failed copy (or a cache shared with others): prefill instead
		}
		n := len(h.prefill())
		need := s.cache.BlocksFor(n)
		if len(s.running) > 0 {
			need += watermark
		}
		if need > s.cache.FreeBlocks() {
			return
		}
		seq := s.cache.NewSeq()
		if err := seq.Reserve(n); err != nil {
			seq.Free()
			return
		}
		h.seq = seq
		if h.rng == nil {
			h.rng = rand.New(rand.NewPCG(h.req.Seed, h.req.Seed^0x9e3779b97f4a7c15)) // as decoder.Generate seeds it
		}
		s.waiting = s.waiting[1:]
		s.running = append(s.running, h)
	}
}

// plan picks this step's entries: every decoding request's last token,
// then prefill chunks within MaxBatchTokens (at least one chunk, so a step
// always progresses); sample[i] says whether entry i's logits give its
// request's next token (a decode step, or the last chunk of a prompt; not
// a replay's, whose next token is already chosen). s.mu is held.
func (s *Scheduler) plan() (entries []decoder.BatchEntry, in []*Handle, sample []bool) {
	budget := s.opt.MaxBatchTokens
	for _, h := range s.running {
		if h.decoding() {
			entries = append(entries, decoder.BatchEntry{Seq: h.seq, IDs: h.gen[len(h.gen)-1:]})
			in = append(in, h)
			sample = append(sample, true)
			budget--
		}
	}
	for _, h := range s.running {
		if h.decoding() {
			continue
		}
		p, fed := h.prefill(), h.seq.Len()
		n := min(len(p)-fed, budget)
		if n <= 0 {
			if len(entries) > 0 {
				continue
			}
			n = min(len(p)-fed, s.opt.MaxBatchTokens)
		}
		entries = append(entries, decoder.BatchEntry{Seq: h.seq, IDs: p[fed : fed+n]})
		in = append(in, h)
		sample = append(sample, len(h.gen) == 0 && fed+n == len(p))
		budget -= n
	}
	return entries, in, sample
}

// Run steps until no request is left, or ctx ends (then every request is
// cancelled and retired, and ctx's error returned), or a forward fails, or
// the scheduler is closed (ErrSchedulerClosed).
func (s *Scheduler) Run(ctx context.Context) error {
	if s == nil || s.m == nil {
		return errNotNew
	}
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

// Close cancels every waiting and running request and retires them (each
// finishes with FinishCancelled, its KV blocks returned to the cache), and
// frees what the scheduler holds on the device beside the paged cache:
// solo mode's contiguous cache and captured step. Submit, Step and Run then
// return ErrSchedulerClosed (a Run in another goroutine ends with it). It
// waits for a Step in progress, so it must not be called from a request's
// OnToken (which runs inside Step). Calls after the first wait until the
// first is done and return nil. The paged cache (and its swap area) stays
// the caller's to close. On a Scheduler not made with New it is an error.
func (s *Scheduler) Close() error {
	if s == nil || s.m == nil {
		return errNotNew
	}
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.CancelAll()
		s.stepMu.Lock()
		defer s.stepMu.Unlock()
		s.retireCancelled()
		s.closeSolo() // its request is retired: nothing to copy back
	})
	return nil
}

// CancelAll cancels every waiting and running request.
func (s *Scheduler) CancelAll() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range slices.Concat(s.waiting, s.running) {
		h.Cancel()
	}
}
