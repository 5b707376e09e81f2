package generate_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/models/generate"
	"github.com/flextensor-go/flextensor/models/kvcache"
)

// stepped is a scheduler's requests with what each streamed and the steps
// whose forward chose its tokens.
type stepped struct {
	s        *generate.Scheduler
	hs       []*generate.Handle
	streamed [][]int32
	stepOf   [][]int
	step     int
}

func submitAll(s *generate.Scheduler, reqs []generate.Request) *stepped {
	g := &stepped{s: s, streamed: make([][]int32, len(reqs)), stepOf: make([][]int, len(reqs))}
	for i, r := range reqs {
		r.OnToken = func(id int32) {
			g.streamed[i] = append(g.streamed[i], id)
			g.stepOf[i] = append(g.stepOf[i], g.step)
		}
		g.hs = append(g.hs, must(s.Submit(r)))
	}
	return g
}

// next runs one step (failing the test past limit steps, so that a
// request never admitted cannot loop forever) and reports whether any
// request is left.
func (g *stepped) next(t *testing.T, limit int) bool {
	t.Helper()
	g.step++
	if g.step > limit {
		t.Fatalf("still %d running and %d waiting after %d steps", g.s.Running(), g.s.Waiting(), limit)
	}
	more, err := g.s.Step()
	if err != nil {
		t.Fatalf("step %d: %v", g.step, err)
	}
	return more
}

// TestSchedulerPreemptDuringPrompt: a request preempted while its own
// prompt is still being prefilled in chunks (no token yet: nothing to
// replay) gives back its blocks, waits, and when readmitted prefills its
// whole prompt again from position 0 — as many chunks as the first time —
// and then gives the tokens it gives alone (a sampled request: its
// sampler is untouched by the lost prefill), streamed once each.
//
// A cache of 8 blocks of 4 positions, chunks of at most 4 tokens: A's
// prompt (3) and B's (24, 6 chunks) fit beside the watermark (1+6+1), so
// both run from step 1; A takes the free block at step 3 (position 4) and
// needs another at step 7 (position 8), when B has prefilled 16 of its 24
// tokens: B, the most recently admitted, is preempted.
func TestSchedulerPreemptDuringPrompt(t *testing.T) {
	m, b := load(t, fixtures[0].dir)
	V := m.Cfg.VocabSize
	s, cache := newScheduler(t, m, b, 8, 4, generate.Options{MaxBatchTokens: 4})
	reqs := []generate.Request{
		{Prompt: prompt(V, 3, 31), MaxNewTokens: 10, IgnoreEOS: true},
		{Prompt: prompt(V, 24, 32), MaxNewTokens: 6, Sampling: kernels.SampleParams{Temperature: 0.9, TopK: 30}, Seed: 5, IgnoreEOS: true},
	}
	g := submitAll(s, reqs)
	preemptStep := 0
	for more := true; more; {
		more = g.next(t, 100)
		if preemptStep == 0 && s.Preemptions() > 0 {
			preemptStep = g.step
			if len(g.streamed[1]) != 0 {
				t.Errorf("B was preempted at step %d after its tokens %v; want during its prompt", g.step, g.streamed[1])
			}
			if s.Running() != 1 || s.Waiting() != 1 {
				t.Errorf("after the preemption: %d run, %d wait; want 1 and 1", s.Running(), s.Waiting())
			}
			if want := cache.TotalBlocks() - cache.BlocksFor(9); cache.FreeBlocks() != want {
				t.Errorf("after the preemption %d blocks free; want %d (only A's, 9 positions)", cache.FreeBlocks(), want)
			}
		}
	}
	if preemptStep != 7 {
		t.Errorf("the preemption came at step %d (%d in all); want one, at step 7", preemptStep, s.Preemptions())
	}
	if s.Preemptions() != 1 {
		t.Errorf("%d preemptions; want 1", s.Preemptions())
	}
	for i, h := range g.hs {
		res, want := h.Wait(), alone(t, m, b, reqs[i])
		if !slices.Equal(res.Generated, want) || res.Finish != generate.FinishLength || res.Err != nil {
			t.Errorf("request %d: %v (%s, %v), alone %v", i, res.Generated, res.Finish, res.Err, want)
		}
		if !slices.Equal(g.streamed[i], res.Generated) {
			t.Errorf("request %d: streamed %v, result %v", i, g.streamed[i], res.Generated)
		}
	}
	// A ran to its end (10 tokens, one a step); B was readmitted the step
	// after, alone, and prefilled all 24 prompt tokens again in 6 chunks.
	if a := g.stepOf[0]; len(a) != 10 || a[0] != 1 || a[9] != 10 {
		t.Errorf("A's tokens came at steps %v; want 1 to 10", a)
	}
	if len(g.stepOf[1]) > 0 && g.stepOf[1][0] != 10+6 {
		t.Errorf("B's first token came at step %d; want 16 (readmitted at 11, 6 chunks of its prompt from position 0)", g.stepOf[1][0])
	}
	if cache.FreeBlocks() != cache.TotalBlocks() || cache.LiveSeqs() != 0 {
		t.Errorf("after the run: %d of %d blocks free, %d sequences live", cache.FreeBlocks(), cache.TotalBlocks(), cache.LiveSeqs())
	}
}

// TestSchedulerWatermark: while a request runs, admission leaves 1% of
// the cache's blocks free (2 of 200 here, not the 1-block minimum): B's
// prompt needs 198 blocks of 1 position, A holds 1, so B would fit with
// one block spare but waits until A ends; then, nothing running, it is
// admitted and grows into the whole cache (198 + 2 positions). A request
// alone whose prompt needs every block is admitted at once.
func TestSchedulerWatermark(t *testing.T) {
	m, b := load(t, fixtures[0].dir)
	V := m.Cfg.VocabSize
	s, cache := newScheduler(t, m, b, 200, 1, generate.Options{})
	reqs := []generate.Request{
		{Prompt: prompt(V, 1, 41), MaxNewTokens: 3, IgnoreEOS: true},
		{Prompt: prompt(V, 198, 42), MaxNewTokens: 3, IgnoreEOS: true},
	}
	g := submitAll(s, reqs)
	for more := true; more; {
		more = g.next(t, 50)
		if len(g.streamed[0]) < 3 && (s.Running() != 1 || s.Waiting() != 1) {
			t.Errorf("step %d, A running with %d blocks free: %d run, %d wait; want B waiting (198 blocks + the watermark of 2)",
				g.step, cache.FreeBlocks(), s.Running(), s.Waiting())
		}
	}
	for i, h := range g.hs {
		res, want := h.Wait(), alone(t, m, b, reqs[i])
		if !slices.Equal(res.Generated, want) || res.Finish != generate.FinishLength {
			t.Errorf("request %d: %v (%s), alone %v", i, res.Generated, res.Finish, want)
		}
	}
	if a, bs := g.stepOf[0], g.stepOf[1]; len(a) != 3 || len(bs) != 3 || bs[0] != a[2]+1 {
		t.Errorf("A's tokens at steps %v, B's at %v; want B's first the step after A's last", a, bs)
	}

	// Nothing running: a prompt of all 200 blocks is admitted at step 1.
	full := generate.Request{Prompt: prompt(V, 200, 43), MaxNewTokens: 1, IgnoreEOS: true}
	freeAtToken := -1
	full.OnToken = func(int32) { freeAtToken = cache.FreeBlocks() }
	h := must(s.Submit(full))
	if more, err := s.Step(); err != nil || more {
		t.Fatalf("the request of the whole cache, step 1: more %v, %v; want it done", more, err)
	}
	if res, want := h.Wait(), alone(t, m, b, full); !slices.Equal(res.Generated, want) || res.Finish != generate.FinishLength {
		t.Errorf("the request of the whole cache: %v (%s), alone %v", res.Generated, res.Finish, want)
	}
	if freeAtToken != 0 {
		t.Errorf("blocks free when the whole-cache request's token came: %d; want 0", freeAtToken)
	}
	if cache.FreeBlocks() != cache.TotalBlocks() || cache.LiveSeqs() != 0 {
		t.Errorf("after the run: %d of %d blocks free, %d sequences live", cache.FreeBlocks(), cache.TotalBlocks(), cache.LiveSeqs())
	}
}

// TestSchedulerSharedCacheGrowFails: two schedulers over one cache (not
// how it is meant to be used, but not a crash): when the other's request
// took the last free block, a decoding request alone in its scheduler
// cannot grow and cannot preempt anyone; it finishes "error" with its
// tokens so far and an error wrapping kvcache.ErrOutOfBlocks, its blocks
// go back, and the other scheduler's request then grows into them.
func TestSchedulerSharedCacheGrowFails(t *testing.T) {
	m, b := load(t, fixtures[0].dir)
	V := m.Cfg.VocabSize
	s1, cache := newScheduler(t, m, b, 4, 4, generate.Options{})
	s2, err := generate.New(m, b, cache, generate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ra := generate.Request{Prompt: prompt(V, 4, 51), MaxNewTokens: 8, IgnoreEOS: true}
	rb := generate.Request{Prompt: prompt(V, 12, 52), MaxNewTokens: 4, IgnoreEOS: true}
	ha := must(s1.Submit(ra))
	if _, err := s1.Step(); err != nil { // A: its prompt (1 block) and its first token
		t.Fatal(err)
	}
	hb := must(s2.Submit(rb))
	if _, err := s2.Step(); err != nil { // B: the other 3 blocks
		t.Fatal(err)
	}
	if cache.FreeBlocks() != 0 {
		t.Fatalf("%d blocks free after both prompts; want 0", cache.FreeBlocks())
	}
	more, err := s1.Step() // A needs a block for position 4: none
	if err != nil || more {
		t.Errorf("s1's step with A unable to grow: more %v, %v; want A retired and no error", more, err)
	}
	select {
	case <-ha.Done():
	default:
		t.Fatalf("A is not finished after the step it could not grow in (%d running, %d waiting in s1)", s1.Running(), s1.Waiting())
	}
	res := ha.Wait()
	if res.Finish != generate.FinishError || !errors.Is(res.Err, kvcache.ErrOutOfBlocks) {
		t.Errorf("A: %s, %v; want error wrapping kvcache.ErrOutOfBlocks", res.Finish, res.Err)
	}
	if want := alone(t, m, b, ra); len(res.Generated) != 1 || res.Generated[0] != want[0] {
		t.Errorf("A's tokens %v; want its first alone, %v", res.Generated, want[:1])
	}
	if cache.FreeBlocks() != 1 || s1.Running() != 0 || s1.Waiting() != 0 {
		t.Errorf("after A failed: %d blocks free (want A's 1), s1 %d running, %d waiting", cache.FreeBlocks(), s1.Running(), s1.Waiting())
	}
	for n := 0; ; n++ {
		if n > 20 {
			t.Fatal("B not done after 20 steps")
		}
		more, err := s2.Step()
		if err != nil {
			t.Fatal(err)
		}
		if !more {
			break
		}
	}
	if r, want := hb.Wait(), alone(t, m, b, rb); !slices.Equal(r.Generated, want) || r.Finish != generate.FinishLength {
		t.Errorf("B: %v (%s), alone %v", r.Generated, r.Finish, want)
	}
	if cache.FreeBlocks() != cache.TotalBlocks() || cache.LiveSeqs() != 0 {
		t.Errorf("at the end: %d of %d blocks free, %d sequences live", cache.FreeBlocks(), cache.TotalBlocks(), cache.LiveSeqs())
	}
}

// newScheduler makes a scheduler for m on b over a new paged cache of
// blocks blocks of blockSize positions, closed when the test ends.
func newScheduler(t *testing.T, m *decoder.Model, b kernels.Backend, blocks, blockSize int, opt generate.Options) (*generate.Scheduler, *kvcache.Paged) {
	t.Helper()
	cache, err := m.NewPagedCache(b, blocks, blockSize)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cache.Close)
	s, err := generate.New(m, b, cache, opt)
	if err != nil {
		t.Fatal(err)
	}
	return s, cache
}
