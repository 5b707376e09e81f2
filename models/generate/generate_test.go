package generate_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models"
	_ "github.com/flextensor-go/flextensor/models/all"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/models/generate"
	"github.com/flextensor-go/flextensor/models/kvcache"
	"github.com/flextensor-go/flextensor/runtime"
)

var fixtures = []struct{ dir, family string }{
	{"../../testdata/tiny-llama", "llama"},
	{"../../testdata/tiny-qwen2", "qwen2"},
	{"../../testdata/tiny-qwen3", "qwen3"},
	{"../../testdata/tiny-mistral", "mistral"},
}

func load(t *testing.T, dir string) (*decoder.Model, kernels.Backend) {
	t.Helper()
	dev := runtime.NewCPU(0)
	m, ck, err := models.Load(dir, dev)
	if err != nil {
		t.Fatal(err)
	}
	b, err := kernels.NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		ck.Close()
		if err := dev.Close(); err != nil {
			t.Errorf("device close: %v", err)
		}
	})
	return m, b
}

func prompt(vocab, n, seed int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32((seed*131 + i*37 + 11) % vocab)
	}
	return p
}

// requests are mixed: prompt lengths 1 to 23, greedy and sampled with
// their own seeds, different limits, one honouring EOS.
func requests(vocab int) []generate.Request {
	sampled := kernels.SampleParams{Temperature: 0.8, TopK: 20, TopP: 0.9}
	return []generate.Request{
		{Prompt: prompt(vocab, 23, 1), MaxNewTokens: 6, IgnoreEOS: true},
		{Prompt: prompt(vocab, 3, 2), MaxNewTokens: 9, Sampling: sampled, Seed: 7, IgnoreEOS: true},
		{Prompt: prompt(vocab, 1, 3), MaxNewTokens: 4, IgnoreEOS: true},
		{Prompt: prompt(vocab, 17, 4), MaxNewTokens: 8, Sampling: sampled, Seed: 8, IgnoreEOS: true},
		{Prompt: prompt(vocab, 9, 5), MaxNewTokens: 2},
		{Prompt: prompt(vocab, 12, 6), MaxNewTokens: 11, Sampling: kernels.SampleParams{Temperature: 1.2}, Seed: 9, IgnoreEOS: true},
	}
}

// alone is what decoder.Generate gives for r.
func alone(t *testing.T, m *decoder.Model, b kernels.Backend, r generate.Request) []int32 {
	t.Helper()
	got, err := m.Generate(b, r.Prompt, decoder.GenerateOptions{MaxNewTokens: r.MaxNewTokens, Sampling: r.Sampling,
		Seed: r.Seed, StopTokens: r.StopTokens, IgnoreEOS: r.IgnoreEOS, Eager: true})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestSchedulerEqualsGenerate: for every family, requests of mixed lengths
// and sampling settings served together — a cache too small for all at
// once (later ones wait for blocks), at most 3 running, prompts prefilled
// in chunks of at most 8 tokens per forward beside others' decode steps —
// give each request the tokens decoder.Generate gives it alone, stream
// them through OnToken in order, end with the right reason (a stop token
// ends one early), and return every block.
//
// It runs twice per family: on the CPU backend, and on it with device-style
// picks (argmaxBackend), where greedy rows are picked by ArgmaxRows,
// temperature-only rows drawn by SampleRows and only the other sampled rows
// read back.
func TestSchedulerEqualsGenerate(t *testing.T) {
	for _, fx := range fixtures {
		for _, withArgmax := range []bool{false, true} {
			name := fx.family
			if withArgmax {
				name += "/argmax"
			}
			t.Run(name, func(t *testing.T) { schedulerEqualsGenerate(t, fx.dir, withArgmax) })
		}
	}
}

// argmaxBackend is the CPU backend with kernels.Argmaxer, as the CUDA
// backend has it; it counts the rows it picked.
type argmaxBackend struct {
	*kernels.CPUBackend
	rows, sampled int
}

// SampleRows draws as a device sampler does (kernels.SampleRowReference).
func (a *argmaxBackend) SampleRows(dst []int32, x *runtime.Tensor, invT, u []float32) error {
	V := x.Dim(-1)
	v := make([]float32, x.NumElements())
	if err := a.ReadF32(v, x); err != nil {
		return err
	}
	for r := range dst {
		dst[r] = int32(kernels.SampleRowReference(v[r*V:(r+1)*V], invT[r], u[r]))
		a.sampled++
	}
	return nil
}

func (a *argmaxBackend) ArgmaxRows(dst []int32, x *runtime.Tensor) error {
	V := x.Dim(-1)
	v := make([]float32, x.NumElements())
	if err := a.ReadF32(v, x); err != nil {
		return err
	}
	for r := range dst {
		row := v[r*V : (r+1)*V]
		dst[r] = int32(kernels.Argmax(row))
		for _, f := range row {
			if f != f || f > math.MaxFloat32 {
				dst[r] = -1
			}
		}
		a.rows++
	}
	return nil
}

func schedulerEqualsGenerate(t *testing.T, dir string, withArgmax bool) {
	{
		{
			m, b := load(t, dir)
			var ab *argmaxBackend
			if withArgmax {
				ab = &argmaxBackend{CPUBackend: b.(*kernels.CPUBackend)}
				b = ab
			}
			reqs := requests(m.Cfg.VocabSize)
			want := make([][]int32, len(reqs))
			for i, r := range reqs {
				want[i] = alone(t, m, b, r)
			}
			// A stop token: the fourth token of request 0 ends it there.
			reqs[0].StopTokens = []int32{want[0][3]}
			reqs[0].IgnoreEOS = false
			want[0] = alone(t, m, b, reqs[0])
			cache, err := m.NewPagedCache(b, 12, 4) // 48 positions: two or three requests at a time
			if err != nil {
				t.Fatal(err)
			}
			defer cache.Close()
			s, err := generate.New(m, b, cache, generate.Options{MaxSeqs: 3, MaxBatchTokens: 8})
			if err != nil {
				t.Fatal(err)
			}
			streamed := make([][]int32, len(reqs))
			var hs []*generate.Handle
			for i, r := range reqs {
				r.OnToken = func(id int32) { streamed[i] = append(streamed[i], id) }
				h, err := s.Submit(r)
				if err != nil {
					t.Fatal(err)
				}
				hs = append(hs, h)
			}
			steps, maxRunning := 0, 0
			for {
				more, err := s.Step()
				if err != nil {
					t.Fatal(err)
				}
				steps++
				maxRunning = max(maxRunning, s.Running())
				if !more {
					break
				}
			}
			for i, h := range hs {
				res := h.Wait()
				if res.ID != i || res.Err != nil {
					t.Errorf("request %d: id %d, error %v", i, res.ID, res.Err)
				}
				if !slices.Equal(res.Generated, want[i]) {
					t.Errorf("request %d: batched %v, alone %v", i, res.Generated, want[i])
				}
				if !slices.Equal(streamed[i], res.Generated) {
					t.Errorf("request %d: streamed %v, result %v", i, streamed[i], res.Generated)
				}
				wantReason := generate.FinishLength
				if len(want[i]) < reqs[i].MaxNewTokens {
					wantReason = generate.FinishStop
				}
				if res.Finish != wantReason {
					t.Errorf("request %d: finish %q, want %q", i, res.Finish, wantReason)
				}
			}
			if hs[0].Wait().Finish != generate.FinishStop {
				t.Errorf("the stop token did not stop request 0")
			}
			if maxRunning < 2 || maxRunning > 3 {
				t.Errorf("at most %d requests ran at once; want 2 or 3", maxRunning)
			}
			if cache.FreeBlocks() != cache.TotalBlocks() || cache.LiveSeqs() != 0 {
				t.Errorf("after the run: %d of %d blocks free, %d sequences live", cache.FreeBlocks(), cache.TotalBlocks(), cache.LiveSeqs())
			}
			if ab != nil && (ab.rows == 0 || ab.sampled == 0) {
				t.Errorf("the scheduler picked %d greedy rows and sampled %d on the device; want some of each", ab.rows, ab.sampled)
			}
		}
	}
}

// TestSchedulerCancel: a cancelled running request retires at the next
// step with its tokens so far and its blocks back in the pool; a cancelled
// waiting one leaves the queue; the others finish as alone.
func TestSchedulerCancel(t *testing.T) {
	m, b := load(t, fixtures[0].dir)
	s, cache := newScheduler(t, m, b, 16, 4, generate.Options{MaxSeqs: 2})
	V := m.Cfg.VocabSize
	reqs := []generate.Request{
		{Prompt: prompt(V, 5, 1), MaxNewTokens: 20, IgnoreEOS: true},
		{Prompt: prompt(V, 7, 2), MaxNewTokens: 6, IgnoreEOS: true},
		{Prompt: prompt(V, 2, 3), MaxNewTokens: 3, IgnoreEOS: true},
	}
	var hs []*generate.Handle
	for _, r := range reqs {
		h, err := s.Submit(r)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	for range 3 {
		if _, err := s.Step(); err != nil {
			t.Fatal(err)
		}
	}
	free := cache.FreeBlocks()
	hs[0].Cancel() // running
	hs[2].Cancel() // waiting (MaxSeqs 2)
	if _, err := s.Step(); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2} {
		select {
		case <-hs[i].Done():
		default:
			t.Fatalf("request %d still running a step after Cancel", i)
		}
	}
	if r := hs[0].Wait(); r.Finish != generate.FinishCancelled || len(r.Generated) != 3 {
		t.Errorf("cancelled running request: %q with %d tokens, want cancelled with 3", r.Finish, len(r.Generated))
	}
	if r := hs[2].Wait(); r.Finish != generate.FinishCancelled || len(r.Generated) != 0 {
		t.Errorf("cancelled waiting request: %q with %d tokens", r.Finish, len(r.Generated))
	}
	// Its blocks come back: those of its 5 prompt positions and the 2
	// tokens fed back (blocks are taken as a request grows; request 1's
	// next position is in a block it holds).
	if got, want := cache.FreeBlocks(), free+cache.BlocksFor(5+3-1); got != want {
		t.Errorf("%d blocks free after the cancel, want %d", got, want)
	}
	if err := s.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := hs[1].Wait(); !slices.Equal(r.Generated, alone(t, m, b, reqs[1])) || r.Finish != generate.FinishLength {
		t.Errorf("the other request: %v (%s), alone %v", r.Generated, r.Finish, alone(t, m, b, reqs[1]))
	}
	if cache.FreeBlocks() != cache.TotalBlocks() {
		t.Errorf("%d of %d blocks free at the end", cache.FreeBlocks(), cache.TotalBlocks())
	}
	// Run with a cancelled context retires everything.
	h, err := s.Submit(reqs[0])
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Run with a cancelled context: %v", err)
	}
	if r := h.Wait(); r.Finish != generate.FinishCancelled {
		t.Errorf("after Run's context ended: %q", r.Finish)
	}
	if cache.FreeBlocks() != cache.TotalBlocks() || s.Running()+s.Waiting() != 0 {
		t.Errorf("after Run's context ended: %d of %d blocks free, %d running, %d waiting", cache.FreeBlocks(), cache.TotalBlocks(), s.Running(), s.Waiting())
	}
}

// TestSchedulerBadInput: bad requests are refused at Submit with errors
// naming the problem, and the requests already queued are unharmed.
func TestSchedulerBadInput(t *testing.T) {
	m, b := load(t, fixtures[0].dir)
	cache, err := m.NewPagedCache(b, 4, 4) // 16 positions
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	s, err := generate.New(m, b, cache, generate.Options{MaxQueue: 1, MaxContext: 12})
	if err != nil {
		t.Fatal(err)
	}
	V := m.Cfg.VocabSize
	good := generate.Request{Prompt: prompt(V, 4, 1), MaxNewTokens: 5, IgnoreEOS: true}
	h, err := s.Submit(good)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		r    generate.Request
		is   error
		msg  string
	}{
		{"empty prompt", generate.Request{MaxNewTokens: 1}, generate.ErrBadRequest, "empty prompt"},
		{"vocabulary", generate.Request{Prompt: []int32{1, int32(V)}, MaxNewTokens: 1}, generate.ErrBadRequest, fmt.Sprintf("token id %d at position 1", V)},
		{"negative", generate.Request{Prompt: []int32{1}, MaxNewTokens: -1}, generate.ErrBadRequest, "negative"},
		{"negative stop token", generate.Request{Prompt: []int32{1}, MaxNewTokens: 1, StopTokens: []int32{2, -5}}, generate.ErrBadRequest, "stop token -5 (StopTokens[1]) is outside the vocabulary"},
		{"stop token past the vocabulary", generate.Request{Prompt: []int32{1}, MaxNewTokens: 1, StopTokens: []int32{int32(V)}}, generate.ErrBadRequest, fmt.Sprintf("stop token %d (StopTokens[0])", V)},
		{"sampling", generate.Request{Prompt: []int32{1}, MaxNewTokens: 1, Sampling: kernels.SampleParams{TopP: 2}}, generate.ErrBadRequest, "top-p 2"},
		{"longer than the context", generate.Request{Prompt: prompt(V, 13, 2), MaxNewTokens: 1}, generate.ErrTooLong, "13 tokens is longer than the context of 12"},
		{"queue full", generate.Request{Prompt: []int32{1}, MaxNewTokens: 1}, generate.ErrQueueFull, "1 requests wait"},
	} {
		_, err := s.Submit(tc.r)
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: error %v, want %v containing %q", tc.name, err, tc.is, tc.msg)
		}
	}
	// More blocks than the whole cache: a context of 20 over 16 positions.
	big, err := generate.New(m, b, cache, generate.Options{MaxContext: 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := big.Submit(generate.Request{Prompt: prompt(V, 10, 3), MaxNewTokens: 10}); !errors.Is(err, generate.ErrTooLong) || !errors.Is(err, generate.ErrCacheTooSmall) ||
		!strings.Contains(err.Error(), "the cache has 4 in all") || strings.Contains(err.Error(), "--") {
		t.Errorf("more blocks than the cache: %v (want ErrTooLong and ErrCacheTooSmall, naming no CLI flag)", err)
	}
	// A prompt longer than the context is not a cache problem.
	if _, err := s.Submit(generate.Request{Prompt: prompt(V, 13, 2), MaxNewTokens: 1}); errors.Is(err, generate.ErrCacheTooSmall) {
		t.Errorf("a prompt longer than the context: %v matches ErrCacheTooSmall", err)
	}
	// MaxNewFor is Submit's limit: 16 positions hold a 10-token prompt and
	// 7 new tokens (the last is never fed back), not 8.
	if n := big.MaxNewFor(10); n != 7 {
		t.Errorf("MaxNewFor(10) = %d over 16 positions, want 7", n)
	}
	if _, err := big.Submit(generate.Request{Prompt: prompt(V, 10, 3), MaxNewTokens: big.MaxNewFor(10) + 1}); !errors.Is(err, generate.ErrTooLong) {
		t.Errorf("MaxNewFor(10)+1 new tokens: %v, want ErrTooLong", err)
	}
	if _, err := big.Submit(generate.Request{Prompt: prompt(V, 10, 3), MaxNewTokens: big.MaxNewFor(10)}); err != nil {
		t.Errorf("MaxNewFor(10) new tokens: %v, want it queued", err)
	}
	// A request capped by the context ends with "length" at its end.
	if err := s.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := h.Wait(); !slices.Equal(r.Generated, alone(t, m, b, good)) {
		t.Errorf("the good request: %v, alone %v", r.Generated, alone(t, m, b, good))
	}
	capped, err := s.Submit(generate.Request{Prompt: prompt(V, 10, 4), MaxNewTokens: 50, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := capped.Wait(); len(r.Generated) != 3 || r.Finish != generate.FinishLength {
		t.Errorf("a request reaching the context of 12 from 10 tokens: %d tokens (%s), want 3 (length)", len(r.Generated), r.Finish)
	}
	if r := must(s.Submit(generate.Request{Prompt: []int32{1}, MaxNewTokens: 0})); r.Wait().Finish != generate.FinishLength {
		t.Errorf("no new tokens: not finished at once")
	}
	if cache.FreeBlocks() != cache.TotalBlocks() {
		t.Errorf("%d of %d blocks free at the end", cache.FreeBlocks(), cache.TotalBlocks())
	}
}

func must(h *generate.Handle, err error) *generate.Handle {
	if err != nil {
		panic(err)
	}
	return h
}

// preemptRequests are four requests whose prompts (5 to 8 tokens: 8 blocks
// of 4) and the admission watermark (1 block) fit a cache of 10 blocks, but
// whose whole reaches (16 to 19 positions: 19 blocks) do not: all four are
// admitted at once and preempted as they grow. The last two are sampled
// with their own seeds; the last is the most recently admitted, the first
// preempted (after its first token), the third next (after 6).
func preemptRequests(vocab int) []generate.Request {
	sampled := kernels.SampleParams{Temperature: 0.8, TopK: 20, TopP: 0.9}
	return []generate.Request{
		{Prompt: prompt(vocab, 5, 11), MaxNewTokens: 12, IgnoreEOS: true},
		{Prompt: prompt(vocab, 6, 12), MaxNewTokens: 12, IgnoreEOS: true},
		{Prompt: prompt(vocab, 7, 13), MaxNewTokens: 12, Sampling: kernels.SampleParams{Temperature: 1.1}, Seed: 21, IgnoreEOS: true},
		{Prompt: prompt(vocab, 8, 14), MaxNewTokens: 12, Sampling: sampled, Seed: 22, IgnoreEOS: true},
	}
}

// preemptRig is a scheduler over a cache of 10 blocks of 4 positions
// (prefill chunks of at most 8 tokens, so a replay is prefilled in chunks
// too) with requests submitted, what they streamed and, for each, the
// steps whose forward chose its tokens.
type preemptRig struct {
	s        *generate.Scheduler
	cache    *kvcache.Paged
	hs       []*generate.Handle
	streamed [][]int32
	stepOf   [][]int
	step     int // steps run
}

func newPreemptRig(t *testing.T, m *decoder.Model, b kernels.Backend, reqs []generate.Request) *preemptRig {
	t.Helper()
	return newPreemptRigSwap(t, m, b, reqs, 0)
}

// newPreemptRigSwap is newPreemptRig with a swap area of swapBytes
// (Options.SwapBytes).
func newPreemptRigSwap(t *testing.T, m *decoder.Model, b kernels.Backend, reqs []generate.Request, swapBytes int64) *preemptRig {
	t.Helper()
	s, cache := newScheduler(t, m, b, 10, 4, generate.Options{MaxBatchTokens: 8, SwapBytes: swapBytes})
	g := &preemptRig{s: s, cache: cache, streamed: make([][]int32, len(reqs)), stepOf: make([][]int, len(reqs))}
	for i, r := range reqs {
		r.OnToken = func(id int32) {
			g.streamed[i] = append(g.streamed[i], id)
			g.stepOf[i] = append(g.stepOf[i], g.step)
		}
		g.hs = append(g.hs, must(s.Submit(r)))
	}
	return g
}

// next runs one step and reports whether any request is left.
func (g *preemptRig) next(t *testing.T) bool {
	t.Helper()
	g.step++
	more, err := g.s.Step()
	if err != nil {
		t.Fatalf("step %d: %v", g.step, err)
	}
	return more
}

// allFree checks that every block is back and no sequence is live.
func (g *preemptRig) allFree(t *testing.T) {
	t.Helper()
	if g.cache.FreeBlocks() != g.cache.TotalBlocks() || g.cache.LiveSeqs() != 0 {
		t.Errorf("after the run: %d of %d blocks free, %d sequences live", g.cache.FreeBlocks(), g.cache.TotalBlocks(), g.cache.LiveSeqs())
	}
}

// preempted reports whether a request's tokens came with a gap: a request
// that runs gets a token every step once its prompt is in, so a gap is a
// preemption (no token at the preempting step, none while it waits, none
// at the step that prefills its replay).
func preempted(steps []int) bool {
	for i := 1; i < len(steps); i++ {
		if steps[i] != steps[i-1]+1 {
			return true
		}
	}
	return false
}

// TestSchedulerPreemption: requests whose prompts fit the cache together
// but whose whole reaches do not all run at once from the first step, are
// preempted as they grow (never the oldest), and still give the tokens
// decoder.Generate gives each alone — greedy ones and sampled ones with
// their seeds (the sampler goes on with the same stream after the
// replay) — streamed once each, finishing with "length"; every block comes
// back. On every family, and on the first with device-style picks
// (argmaxBackend: the temperature-only request draws on the "device" from
// the same generator).
func TestSchedulerPreemption(t *testing.T) {
	for fi, fx := range fixtures {
		for _, withArgmax := range []bool{false, true} {
			if withArgmax && fi > 0 {
				continue
			}
			name := fx.family
			if withArgmax {
				name += "/argmax"
			}
			t.Run(name, func(t *testing.T) {
				m, b := load(t, fx.dir)
				if withArgmax {
					b = &argmaxBackend{CPUBackend: b.(*kernels.CPUBackend)}
				}
				reqs := preemptRequests(m.Cfg.VocabSize)
				g := newPreemptRig(t, m, b, reqs)
				s, hs, streamed, stepOf := g.s, g.hs, g.streamed, g.stepOf
				for more := true; more; {
					more = g.next(t)
					if g.step == 1 && s.Running() != len(reqs) {
						t.Errorf("after the first step %d requests run, %d wait; want all %d running", s.Running(), s.Waiting(), len(reqs))
					}
				}
				if s.Preemptions() == 0 {
					t.Errorf("no preemption: %d requests reaching 19 blocks in all ran in a cache of %d", len(reqs), g.cache.TotalBlocks())
				}
				for i, h := range hs {
					res := h.Wait()
					want := alone(t, m, b, reqs[i])
					if !slices.Equal(res.Generated, want) || res.Finish != generate.FinishLength || res.Err != nil {
						t.Errorf("request %d: %v (%s, %v), alone %v", i, res.Generated, res.Finish, res.Err, want)
					}
					if !slices.Equal(streamed[i], res.Generated) {
						t.Errorf("request %d: streamed %v, result %v", i, streamed[i], res.Generated)
					}
				}
				if preempted(stepOf[0]) {
					t.Errorf("the oldest request was preempted: its tokens came at steps %v", stepOf[0])
				}
				// The block counts do not depend on the tokens: the two
				// newest (the sampled ones) are preempted, the third after
				// 6 tokens, so its replay is prefilled in two chunks.
				for _, i := range []int{2, 3} {
					if !preempted(stepOf[i]) {
						t.Errorf("request %d (sampled) was not preempted: its tokens came at steps %v", i, stepOf[i])
					}
				}
				g.allFree(t)
			})
		}
	}
}

// TestSchedulerCancelPreempted: a request cancelled while it waits after a
// preemption finishes "cancelled" with the tokens it had (streamed once,
// none after), holds no blocks, and the others finish as alone.
func TestSchedulerCancelPreempted(t *testing.T) {
	m, b := load(t, fixtures[0].dir)
	reqs := preemptRequests(m.Cfg.VocabSize)
	g := newPreemptRig(t, m, b, reqs)
	s, hs, streamed := g.s, g.hs, g.streamed
	last := len(reqs) - 1
	for s.Preemptions() == 0 {
		if !g.next(t) {
			t.Fatalf("all requests finished after %d steps without a preemption", g.step)
		}
	}
	if s.Waiting() != 1 || s.Running() != last {
		t.Fatalf("after the first preemption: %d wait, %d run; want 1 and %d", s.Waiting(), s.Running(), last)
	}
	had := slices.Clone(streamed[last])
	if len(had) == 0 {
		t.Fatalf("the preempted request had no tokens yet")
	}
	hs[last].Cancel()
	if err := s.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := hs[last].Wait(); r.Finish != generate.FinishCancelled || !slices.Equal(r.Generated, had) || !slices.Equal(streamed[last], had) {
		t.Errorf("the cancelled preempted request: %v (%s), streamed %v; it had %v", r.Generated, r.Finish, streamed[last], had)
	}
	if want := alone(t, m, b, reqs[last]); !slices.Equal(had, want[:len(had)]) {
		t.Errorf("the cancelled request's tokens %v are not the start of its tokens alone %v", had, want)
	}
	for i := range last {
		if r, want := hs[i].Wait(), alone(t, m, b, reqs[i]); !slices.Equal(r.Generated, want) || r.Finish != generate.FinishLength {
			t.Errorf("request %d: %v (%s), alone %v", i, r.Generated, r.Finish, want)
		}
	}
	g.allFree(t)
}

// TestSchedulerBesideGenerate: a Scheduler stepping in one goroutine while
// two others call Generate on the same model gives every request the
// tokens it gives alone, and so does every Generate: the scheduler's
// forward and the choice of its tokens hold the model's forward lock
// (decoder.Model.ForwardBatchFunc), so a Generate's forward cannot
// overwrite the logits between the two.
func TestSchedulerBesideGenerate(t *testing.T) {
	m, b := load(t, fixtures[0].dir)
	reqs := requests(m.Cfg.VocabSize)
	want := make([][]int32, len(reqs))
	for i, r := range reqs {
		want[i] = alone(t, m, b, r)
	}
	s, _ := newScheduler(t, m, b, 12, 4, generate.Options{MaxSeqs: 3, MaxBatchTokens: 8})
	var hs []*generate.Handle
	for _, r := range reqs {
		hs = append(hs, must(s.Submit(r)))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			more, err := s.Step()
			if err != nil {
				errs <- fmt.Errorf("scheduler step: %v", err)
				return
			}
			if !more {
				return
			}
		}
	}()
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range 3 {
				i := (2*g + c) % len(reqs)
				r := reqs[i]
				got, err := m.Generate(b, r.Prompt, decoder.GenerateOptions{MaxNewTokens: r.MaxNewTokens, Sampling: r.Sampling,
					Seed: r.Seed, StopTokens: r.StopTokens, IgnoreEOS: r.IgnoreEOS})
				if err != nil || !slices.Equal(got, want[i]) {
					errs <- fmt.Errorf("Generate of request %d beside the scheduler: %v, %v; alone %v", i, got, err, want[i])
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, h := range hs {
		if res := h.Wait(); res.Err != nil || !slices.Equal(res.Generated, want[i]) {
			t.Errorf("request %d in the scheduler beside Generate: %v, %v; alone %v", i, res.Generated, res.Err, want[i])
		}
	}
}

// TestNewMaxContext: New refuses a MaxContext beyond the model's
// max_position_embeddings, naming both, and takes one at or below it.
func TestNewMaxContext(t *testing.T) {
	m, b := load(t, fixtures[0].dir)
	cache, err := m.NewPagedCache(b, 4, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	trained := m.Cfg.MaxPositionEmbeddings
	if trained <= 0 {
		t.Fatalf("fixture %s has no max_position_embeddings", fixtures[0].dir)
	}
	_, err = generate.New(m, b, cache, generate.Options{MaxContext: trained + 1})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("MaxContext %d", trained+1)) || !strings.Contains(err.Error(), fmt.Sprintf("max_position_embeddings %d", trained)) {
		t.Errorf("MaxContext %d over %d: %v, want an error naming both", trained+1, trained, err)
	}
	if _, err := generate.New(m, b, cache, generate.Options{MaxContext: trained}); err != nil {
		t.Errorf("MaxContext at the model's context: %v", err)
	}
}

// TestZeroScheduler: a Scheduler not made with New says so instead of
// refusing requests for odd reasons or panicking.
func TestZeroScheduler(t *testing.T) {
	var s generate.Scheduler
	if _, err := s.Submit(generate.Request{Prompt: []int32{1}, MaxNewTokens: 1}); err == nil || !strings.Contains(err.Error(), "not made with generate.New") {
		t.Errorf("Submit on a zero Scheduler: %v", err)
	}
	if _, err := s.Step(); err == nil || !strings.Contains(err.Error(), "not made with generate.New") {
		t.Errorf("Step on a zero Scheduler: %v", err)
	}
	if err := s.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "not made with generate.New") {
		t.Errorf("Run on a zero Scheduler: %v", err)
	}
	if n := s.MaxNewFor(1); n != 0 {
		t.Errorf("MaxNewFor on a zero Scheduler: %d", n)
	}
	var nilS *generate.Scheduler
	if _, err := nilS.Step(); err == nil || !strings.Contains(err.Error(), "not made with generate.New") {
		t.Errorf("Step on a nil Scheduler: %v", err)
	}
	if err := nilS.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "not made with generate.New") {
		t.Errorf("Run on a nil Scheduler: %v", err)
	}
	nilS.CancelAll() // nothing to cancel; no panic
}

// TestSchedulerClose: Close retires every request, running and waiting,
// as cancelled with its KV blocks returned; Submit and Step then fail with
// ErrSchedulerClosed, a second Close does nothing, and Run stops at once.
func TestSchedulerClose(t *testing.T) {
	m, b := load(t, fixtures[0].dir)
	cache, err := m.NewPagedCache(b, 16, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	s, err := generate.New(m, b, cache, generate.Options{MaxSeqs: 1})
	if err != nil {
		t.Fatal(err)
	}
	V := m.Cfg.VocabSize
	var hs []*generate.Handle
	for i, n := range []int{5, 3} {
		h, err := s.Submit(generate.Request{Prompt: prompt(V, n, i+1), MaxNewTokens: 20, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	for range 3 {
		if _, err := s.Step(); err != nil {
			t.Fatal(err)
		}
	}
	if s.Running() != 1 || s.Waiting() != 1 || cache.FreeBlocks() == cache.TotalBlocks() {
		t.Fatalf("before Close: %d running, %d waiting, %d of %d blocks free", s.Running(), s.Waiting(), cache.FreeBlocks(), cache.TotalBlocks())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for i, h := range hs {
		select {
		case <-h.Done():
		default:
			t.Fatalf("request %d not retired by Close", i)
		}
		if r := h.Wait(); r.Finish != generate.FinishCancelled {
			t.Errorf("request %d after Close: %q", i, r.Finish)
		}
	}
	if got := hs[0].Wait().Generated; len(got) != 3 {
		t.Errorf("the running request had %d tokens when closed, want one a step: 3", len(got))
	}
	if cache.FreeBlocks() != cache.TotalBlocks() || s.Running()+s.Waiting() != 0 {
		t.Errorf("after Close: %d of %d blocks free, %d running, %d waiting", cache.FreeBlocks(), cache.TotalBlocks(), s.Running(), s.Waiting())
	}
	if _, err := s.Submit(generate.Request{Prompt: prompt(V, 2, 9), MaxNewTokens: 1}); !errors.Is(err, generate.ErrSchedulerClosed) {
		t.Errorf("Submit after Close: %v", err)
	}
	if more, err := s.Step(); more || !errors.Is(err, generate.ErrSchedulerClosed) {
		t.Errorf("Step after Close: %v, %v", more, err)
	}
	if err := s.Run(context.Background()); !errors.Is(err, generate.ErrSchedulerClosed) {
		t.Errorf("Run after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	var zero generate.Scheduler
	if err := zero.Close(); err == nil || !strings.Contains(err.Error(), "not made with generate.New") {
		t.Errorf("Close on a zero Scheduler: %v", err)
	}
}

// TestSchedulerCloseDuringRun: Close from another goroutine while Run
// steps long requests waits for the Step in progress, retires them all as
// cancelled with every block back, and Run ends with ErrSchedulerClosed;
// two concurrent Closes both return once the work is done.
func TestSchedulerCloseDuringRun(t *testing.T) {
	m, b := load(t, fixtures[0].dir)
	s, cache := newScheduler(t, m, b, 64, 8, generate.Options{MaxSeqs: 2})
	V := m.Cfg.VocabSize
	stepped := make(chan struct{}, 1)
	var hs []*generate.Handle
	for i := range 3 {
		h, err := s.Submit(generate.Request{Prompt: prompt(V, 4, i+1), MaxNewTokens: 100, IgnoreEOS: true,
			OnToken: func(int32) {
				select {
				case stepped <- struct{}{}:
				default:
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	ran := make(chan error, 1)
	go func() { ran <- s.Run(context.Background()) }()
	<-stepped // Run is stepping
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			for i, h := range hs { // both Closes return after the retirement
				select {
				case <-h.Done():
				default:
					t.Errorf("request %d not retired when Close returned", i)
				}
			}
		}()
	}
	wg.Wait()
	if err := <-ran; !errors.Is(err, generate.ErrSchedulerClosed) {
		t.Errorf("Run after Close: %v", err)
	}
	for i, h := range hs {
		if r := h.Wait(); r.Finish != generate.FinishCancelled || len(r.Generated) >= 100 {
			t.Errorf("request %d: %q with %d tokens", i, r.Finish, len(r.Generated))
		}
	}
	if cache.FreeBlocks() != cache.TotalBlocks() {
		t.Errorf("%d of %d blocks free after Close", cache.FreeBlocks(), cache.TotalBlocks())
	}
}
