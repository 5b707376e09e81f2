package generate_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/models/generate"
	"github.com/flextensor-go/flextensor/runtime"
)

// graphBackend is the CPU backend (with device-style picks, argmaxBackend)
// made a kernels.StepCapturer faithful to the CUDA backend's: a capture
// runs the step once (a real capture's recording sets the logits tensor)
// and keeps it; a replay runs it again with the step buffer's token
// embedded instead of the capture's (SetStep), at the cache's position,
// which the decoder's replay keeps at the step buffer's. So solo steps
// compute what eager steps compute, through the graph path's code.
type graphBackend struct {
	*argmaxBackend
	captures, replays int
	replaying         bool
	stepTok           int32
	stepPos           int
	bad               []string // steps that embedded the wrong token
	failCapture       int      // the capture (from 1) that fails with errCapture; 0: none
}

var errCapture = errors.New("test: the capture fails")

type replayGraph struct {
	g  *graphBackend
	fn func() error
}

func (r *replayGraph) Replay() error {
	r.g.replays++
	r.g.replaying = true
	defer func() { r.g.replaying = false }()
	return r.fn()
}

func (r *replayGraph) Close() error { return nil }

func (g *graphBackend) CaptureStep(fn func() error) (kernels.Graph, error) {
	g.captures++
	if g.captures == g.failCapture {
		return nil, errCapture
	}
	if err := fn(); err != nil {
		return nil, err
	}
	return &replayGraph{g, fn}, nil
}

func (g *graphBackend) SetStep(ids []int32, pos0 int) error {
	g.stepTok, g.stepPos = ids[0], pos0
	return nil
}

func (g *graphBackend) Embedding(out, table *runtime.Tensor, ids []int32) error {
	if g.replaying {
		if len(ids) != 1 {
			g.bad = append(g.bad, "a replay of more than one token")
		}
		ids = []int32{g.stepTok}
	}
	return g.argmaxBackend.Embedding(out, table, ids)
}

func newGraphBackend(b kernels.Backend) *graphBackend {
	return &graphBackend{argmaxBackend: &argmaxBackend{CPUBackend: b.(*kernels.CPUBackend)}}
}

func done(h *generate.Handle) bool {
	select {
	case <-h.Done():
		return true
	default:
		return false
	}
}

// soloRun is one run of reqs through a scheduler over a cache of blocks
// blocks of 4 positions: request i is submitted before the step at which
// request at[i] (an earlier one) has after[i] tokens or has finished
// (at[i] < 0: at the start), cancelled once it has cancelAt[i] tokens (0: never).
type soloRun struct {
	reqs     []generate.Request
	at       []int
	after    []int
	cancelAt []int
	blocks   int
	opt      generate.Options
}

type soloResult struct {
	res      []generate.Result
	streamed [][]int32
	graph    int64
	s        *generate.Scheduler
}

func (r soloRun) run(t *testing.T, m *decoder.Model, b kernels.Backend) soloResult {
	t.Helper()
	s, cache := newScheduler(t, m, b, r.blocks, 4, r.opt)
	out := soloResult{streamed: make([][]int32, len(r.reqs)), s: s}
	hs := make([]*generate.Handle, len(r.reqs))
	gen := make([]int, len(r.reqs))
	submit := func() {
		for i, q := range r.reqs {
			if hs[i] != nil {
				continue
			}
			if j := r.at[i]; j < 0 || gen[j] >= r.after[i] || (hs[j] != nil && done(hs[j])) {
				q.OnToken = func(id int32) {
					out.streamed[i] = append(out.streamed[i], id)
					gen[i]++
					if c := r.cancelAt[i]; c > 0 && gen[i] == c {
						hs[i].Cancel()
					}
				}
				hs[i] = must(s.Submit(q))
			}
		}
	}
	for steps := 0; ; steps++ {
		if steps > 1000 {
			t.Fatal("no end after 1000 steps")
		}
		submit()
		more, err := s.Step()
		if err != nil {
			t.Fatalf("step %d: %v", steps, err)
		}
		if !more && !slices.Contains(hs, nil) {
			break
		}
	}
	for _, h := range hs {
		out.res = append(out.res, h.Wait())
	}
	if cache.FreeBlocks() != cache.TotalBlocks() || cache.LiveSeqs() != 0 {
		t.Errorf("after the run: %d of %d blocks free, %d sequences live", cache.FreeBlocks(), cache.TotalBlocks(), cache.LiveSeqs())
	}
	out.graph = s.GraphSteps()
	return out
}

// same runs r with solo graphs off and on, on a capturing CPU backend
// (graphBackend over the CPU backend b), and checks every request's result
// and streamed tokens match.
func (r soloRun) same(t *testing.T, m *decoder.Model, b kernels.Backend) (off, on soloResult, gb *graphBackend) {
	t.Helper()
	gb = newGraphBackend(b)
	off, on = r.compare(t, m, gb, func() {
		if gb.captures != 0 {
			t.Errorf("solo graphs off: %d captures", gb.captures)
		}
	})
	if len(gb.bad) > 0 {
		t.Errorf("replays: %v", gb.bad)
	}
	return off, on, gb
}

// compare runs r with solo graphs off, then (after between) on, on b, and
// checks every request's result and streamed tokens match.
func (r soloRun) compare(t *testing.T, m *decoder.Model, b kernels.Backend, between func()) (off, on soloResult) {
	t.Helper()
	r.opt.SoloGraph = generate.SoloGraphOff
	off = r.run(t, m, b)
	if off.graph != 0 {
		t.Errorf("solo graphs off: %d graph steps", off.graph)
	}
	between()
	r.opt.SoloGraph = generate.SoloGraphOn
	on = r.run(t, m, b)
	for i := range r.reqs {
		a, b := off.res[i], on.res[i]
		if !slices.Equal(a.Generated, b.Generated) || a.Finish != b.Finish || (a.Err == nil) != (b.Err == nil) {
			t.Errorf("request %d: solo graphs on %v (%s, %v), off %v (%s, %v)", i, b.Generated, b.Finish, b.Err, a.Generated, a.Finish, a.Err)
		}
		if !slices.Equal(on.streamed[i], b.Generated) {
			t.Errorf("request %d: streamed %v, result %v", i, on.streamed[i], b.Generated)
		}
	}
	return off, on
}

// TestSchedulerSoloGraph: a request running alone steps through a captured
// graph (one capture, a replay a step after its first token) and gives the
// tokens of batched steps, greedy and sampled, also stopped by a stop
// token; every block comes back.
func TestSchedulerSoloGraph(t *testing.T) {
	for fi, fx := range []struct{ dir, family string }{fixtures[0], fixtures[2], moeFixture} {
		t.Run(fx.family, func(t *testing.T) {
			m, b := load(t, fx.dir)
			V := m.Cfg.VocabSize
			sampled := kernels.SampleParams{Temperature: 0.8, TopK: 20, TopP: 0.9}
			reqs := []generate.Request{
				{Prompt: prompt(V, 7, 1), MaxNewTokens: 20, IgnoreEOS: true},
				{Prompt: prompt(V, 3, 2), MaxNewTokens: 18, Sampling: sampled, Seed: 5, IgnoreEOS: true},
				{Prompt: prompt(V, 5, 3), MaxNewTokens: 18, Sampling: kernels.SampleParams{Temperature: 1.1}, Seed: 6, IgnoreEOS: true},
			}
			if fi > 0 {
				reqs = reqs[:1] // the sampled ones on the first family (the race detector's time)
			}
			for _, q := range reqs {
				r := soloRun{reqs: []generate.Request{q}, at: []int{-1}, after: []int{0}, cancelAt: []int{0}, blocks: 16}
				_, on, gb := r.same(t, m, b)
				if want := int64(q.MaxNewTokens - 1); on.graph != want || gb.captures != 1 || gb.replays != int(want) {
					t.Errorf("%v: %d graph steps, %d captures, %d replays; want %d, 1, %d", q.Sampling, on.graph, gb.captures, gb.replays, want, want)
				}
				if want := alone(t, m, b, q); !slices.Equal(on.res[0].Generated, want) {
					t.Errorf("%v: solo %v, Generate %v", q.Sampling, on.res[0].Generated, want)
				}
				// A stop token (the 16th token) ends the solo run there.
				q.StopTokens, q.IgnoreEOS = []int32{on.res[0].Generated[15]}, false
				r.reqs[0] = q
				off, on2, _ := r.same(t, m, b)
				if on2.res[0].Finish != generate.FinishStop || len(on2.res[0].Generated) > 16 || off.res[0].Finish != generate.FinishStop {
					t.Errorf("%v: with a stop token %v (%s)", q.Sampling, on2.res[0].Generated, on2.res[0].Finish)
				}
			}
		})
	}
}

// TestSchedulerSoloToBatched: a second request arriving while the first
// runs alone ends solo mode (its positions go back into the paged blocks),
// both run batched, and the first goes solo again when the second is done;
// both get the tokens they get with solo graphs off. Also with a cache
// small enough that the batch preempts the second request, with and
// without a swap area, and with MaxSeqs 1 (the second waits, the first
// stays solo to its end, then the second runs solo).
func TestSchedulerSoloToBatched(t *testing.T) {
	for _, fx := range fixtures[:1] { // the GPU test runs more families

		t.Run(fx.family, func(t *testing.T) {
			m, b := load(t, fx.dir)
			V := m.Cfg.VocabSize
			reqs := []generate.Request{
				{Prompt: prompt(V, 6, 1), MaxNewTokens: 36, IgnoreEOS: true},
				{Prompt: prompt(V, 4, 2), MaxNewTokens: 12, Sampling: kernels.SampleParams{Temperature: 0.9}, Seed: 3, IgnoreEOS: true},
			}
			r := soloRun{reqs: reqs, at: []int{-1, 0}, after: []int{0, 4}, cancelAt: []int{0, 0}, blocks: 32}
			_, on, gb := r.same(t, m, b)
			// Alone for 3 steps, batched for 12 (the second's prefill and
			// 11 decode steps), alone again for the last 20.
			if on.graph != 3+20 || gb.captures != 2 {
				t.Errorf("%d graph steps, %d captures; want 23, 2", on.graph, gb.captures)
			}
			// 11 blocks of 4: the first reaches 41 positions, all of
			// them; the second, arriving after the first's 24th token,
			// runs short and is preempted (swapped out with a swap area).
			for _, swap := range []int64{0, 1 << 20} {
				r.blocks, r.opt.SwapBytes, r.after = 11, swap, []int{0, 24}
				_, on, _ := r.same(t, m, b)
				if on.s.Preemptions() == 0 || on.graph == 0 {
					t.Errorf("swap %d: %d preemptions, %d graph steps; want both", swap, on.s.Preemptions(), on.graph)
				}
				if swap > 0 && on.s.Swaps() == 0 {
					t.Errorf("swap %d: no swap", swap)
				}
			}
			// The second (12 tokens) has too few left to go solo.
			r.blocks, r.opt, r.after = 32, generate.Options{MaxSeqs: 1}, []int{0, 4}
			_, on, gb = r.same(t, m, b)
			if on.graph != 35 || gb.captures != 1 {
				t.Errorf("MaxSeqs 1: %d graph steps, %d captures; want 35, 1", on.graph, gb.captures)
			}
		})
	}
}

// TestSchedulerSoloCancel: cancelling a request while it runs alone, or a
// second one while the first is batched with it, gives the tokens chosen
// before and returns every block; the other finishes as without solo mode.
func TestSchedulerSoloCancel(t *testing.T) {
	m, b := load(t, fixtures[0].dir)
	V := m.Cfg.VocabSize
	reqs := []generate.Request{
		{Prompt: prompt(V, 6, 1), MaxNewTokens: 30, IgnoreEOS: true},
		{Prompt: prompt(V, 4, 2), MaxNewTokens: 20, IgnoreEOS: true},
	}
	// The first alone, the first batched, the second batched.
	for _, cancelAt := range [][]int{{5, 0}, {15, 0}, {0, 5}} {
		r := soloRun{reqs: reqs, at: []int{-1, 0}, after: []int{0, 10}, cancelAt: cancelAt, blocks: 32}
		_, on, _ := r.same(t, m, b)
		for i, c := range cancelAt {
			if c > 0 && (on.res[i].Finish != generate.FinishCancelled || len(on.res[i].Generated) != c) {
				t.Errorf("cancel %v: request %d %s with %d tokens", cancelAt, i, on.res[i].Finish, len(on.res[i].Generated))
			}
		}
		if on.graph == 0 {
			t.Errorf("cancel %v: no graph step", cancelAt)
		}
	}
}

// moeFixture has fused expert ops on the CPU backend (graphable).
var moeFixture = struct{ dir, family string }{"../../testdata/tiny-qwen3moe", "qwen3moe"}

// TestSchedulerSoloFallback: on a backend that cannot capture (the plain
// CPU backend) or for a model routing experts on the host (tiny-qwen3moe
// with its fused expert ops off), solo mode on runs every step batched,
// with the same tokens.
func TestSchedulerSoloFallback(t *testing.T) {
	for _, dir := range []string{fixtures[0].dir, moeFixture.dir} {
		m, b := load(t, dir)
		q := generate.Request{Prompt: prompt(m.Cfg.VocabSize, 5, 1), MaxNewTokens: 20, IgnoreEOS: true}
		for _, bk := range []kernels.Backend{b, newGraphBackend(b)} {
			if _, ok := bk.(kernels.StepCapturer); ok {
				if dir == fixtures[0].dir {
					continue // graphable: the other tests
				}
				m.MoEFusedTokens = -1 // experts routed on the host
			}
			r := soloRun{reqs: []generate.Request{q}, at: []int{-1}, after: []int{0}, cancelAt: []int{0}, blocks: 16,
				opt: generate.Options{SoloGraph: generate.SoloGraphOn}}
			on := r.run(t, m, bk)
			if on.graph != 0 {
				t.Errorf("%s on %T: %d graph steps", dir, bk, on.graph)
			}
			if want := alone(t, m, bk, q); !slices.Equal(on.res[0].Generated, want) {
				t.Errorf("%s on %T: %v, Generate %v", dir, bk, on.res[0].Generated, want)
			}
		}
	}
}

// TestSchedulerSoloStop: the model's Stop while a request runs alone
// makes the next step fail with ErrClosed and end the request; its blocks
// come back.
func TestSchedulerSoloStop(t *testing.T) {
	m, b := load(t, fixtures[0].dir)
	s, cache := newScheduler(t, m, newGraphBackend(b), 16, 4, generate.Options{SoloGraph: generate.SoloGraphOn})
	h := must(s.Submit(generate.Request{Prompt: prompt(m.Cfg.VocabSize, 5, 1), MaxNewTokens: 30, IgnoreEOS: true}))
	for s.GraphSteps() < 3 {
		if _, err := s.Step(); err != nil {
			t.Fatal(err)
		}
	}
	m.Stop()
	if _, err := s.Step(); !errors.Is(err, decoder.ErrClosed) {
		t.Fatalf("a step after Stop: %v, want ErrClosed", err)
	}
	if res := h.Wait(); res.Finish != generate.FinishError || len(res.Generated) != 4 {
		t.Errorf("after Stop: %s with %d tokens, want error after 4", res.Finish, len(res.Generated))
	}
	if cache.FreeBlocks() != cache.TotalBlocks() || cache.LiveSeqs() != 0 {
		t.Errorf("after Stop: %d of %d blocks free, %d sequences live", cache.FreeBlocks(), cache.TotalBlocks(), cache.LiveSeqs())
	}
}

// TestSchedGraphEnv: FT_SCHED_GRAPH takes "", "0" and "1" (default on)
// and New refuses anything else naming the variable, as it does a
// SoloGraphMode out of range.
func TestSchedGraphEnv(t *testing.T) {
	m, b := load(t, fixtures[0].dir)
	cache, err := m.NewPagedCache(b, 4, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	for v, want := range map[string]bool{"": true, "0": false, "1": true} {
		t.Setenv(generate.SchedGraphEnv, v)
		if on, err := generate.SoloGraphFromEnv(); on != want || err != nil {
			t.Errorf("FT_SCHED_GRAPH=%q: %v, %v; want %v", v, on, err, want)
		}
		if _, err := generate.New(m, b, cache, generate.Options{}); err != nil {
			t.Errorf("FT_SCHED_GRAPH=%q: %v", v, err)
		}
	}
	for _, v := range []string{"on", "2", " 1", "true"} {
		t.Setenv(generate.SchedGraphEnv, v)
		if _, err := generate.New(m, b, cache, generate.Options{}); err == nil || !strings.Contains(err.Error(), "FT_SCHED_GRAPH") {
			t.Errorf("FT_SCHED_GRAPH=%q: New gave %v; want an error naming the variable", v, err)
		}
		// An explicit mode does not read the variable.
		if _, err := generate.New(m, b, cache, generate.Options{SoloGraph: generate.SoloGraphOff}); err != nil {
			t.Errorf("FT_SCHED_GRAPH=%q with SoloGraphOff: %v", v, err)
		}
	}
	if _, err := generate.New(m, b, cache, generate.Options{SoloGraph: 7}); err == nil {
		t.Error("SoloGraph 7: no error")
	}
}

// TestSchedulerSoloGrow: a request whose reach exceeds the first solo
// cache (soloChunk 8: 14 positions for a context of 6) fills it, copies its
// positions back and enters solo mode again with twice the room (28, then
// its reach, 45), stepping every decode step through a graph (three
// captures), with the tokens of solo graphs off.
func TestSchedulerSoloGrow(t *testing.T) {
	defer generate.SetSoloChunk(8)()
	m, b := load(t, fixtures[0].dir)
	V := m.Cfg.VocabSize
	for _, q := range []generate.Request{
		{Prompt: prompt(V, 6, 1), MaxNewTokens: 40, IgnoreEOS: true},
		{Prompt: prompt(V, 6, 2), MaxNewTokens: 40, Sampling: kernels.SampleParams{Temperature: 0.9}, Seed: 4, IgnoreEOS: true},
	} {
		r := soloRun{reqs: []generate.Request{q}, at: []int{-1}, after: []int{0}, cancelAt: []int{0}, blocks: 16}
		_, on, gb := r.same(t, m, b)
		if on.graph != 39 || gb.captures != 3 || on.s.SoloFailures() != 0 {
			t.Errorf("%v: %d graph steps, %d captures, %d solo failures; want 39, 3, 0", q.Sampling, on.graph, gb.captures, on.s.SoloFailures())
		}
		if want := alone(t, m, b, q); !slices.Equal(on.res[0].Generated, want) {
			t.Errorf("%v: solo %v, Generate %v", q.Sampling, on.res[0].Generated, want)
		}
	}
}

// TestSchedulerSoloFailure: a solo entry that fails for another reason
// than ErrNoGraph (here the capture) leaves the request batched to its end
// with the same tokens, counted in SoloFailures with its error in SoloErr;
// also when it fails at the second entry, after the first solo cache
// filled (its positions copied back first).
func TestSchedulerSoloFailure(t *testing.T) {
	defer generate.SetSoloChunk(8)()
	m, b := load(t, fixtures[0].dir)
	q := generate.Request{Prompt: prompt(m.Cfg.VocabSize, 6, 1), MaxNewTokens: 30, IgnoreEOS: true}
	// Failing at the first capture: no graph step; at the second: the 8
	// steps of the first solo cache (positions 6..13).
	for fail, graph := range map[int]int64{1: 0, 2: 8} {
		gb := newGraphBackend(b)
		gb.failCapture = fail
		r := soloRun{reqs: []generate.Request{q}, at: []int{-1}, after: []int{0}, cancelAt: []int{0}, blocks: 16}
		_, on := r.compare(t, m, gb, func() {})
		if on.graph != graph || gb.captures != fail {
			t.Errorf("capture %d failing: %d graph steps, %d captures; want %d, %d", fail, on.graph, gb.captures, graph, fail)
		}
		if n, err := on.s.SoloFailures(), on.s.SoloErr(); n != 1 || !errors.Is(err, errCapture) || !strings.Contains(err.Error(), "request 0") {
			t.Errorf("capture %d failing: %d solo failures, first %v; want 1, the capture's error naming the request", fail, n, err)
		}
		if on.res[0].Err != nil || len(on.res[0].Generated) != q.MaxNewTokens {
			t.Errorf("capture %d failing: %v (%d tokens)", fail, on.res[0].Err, len(on.res[0].Generated))
		}
	}
	// No device memory for the contiguous cache (the paged one was taken
	// before the fault was set).
	gb := newGraphBackend(b)
	dev := b.Device().(*runtime.CPUDevice)
	defer func() { dev.AllocFault = nil }()
	r := soloRun{reqs: []generate.Request{q}, at: []int{-1}, after: []int{0}, cancelAt: []int{0}, blocks: 16}
	r.opt.MaxSeqs = 1
	_, on := r.compare(t, m, gb, func() {
		dev.AllocFault = func(label string, bytes int64) error {
			if strings.HasPrefix(label, "kv cache layer") {
				return fmt.Errorf("test: %q: %w", label, runtime.ErrOutOfMemory)
			}
			return nil
		}
	})
	dev.AllocFault = nil
	if n, err := on.s.SoloFailures(), on.s.SoloErr(); n != 1 || !errors.Is(err, runtime.ErrOutOfMemory) || on.graph != 0 || gb.captures != 0 {
		t.Errorf("no memory for the solo cache: %d solo failures (%v), %d graph steps, %d captures; want 1 (out of memory), 0, 0", n, err, on.graph, gb.captures)
	}
}
