package decoder_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	goruntime "runtime"
	"slices"
	"sync"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/runtime"
)

// fakeFeeder is a CPU backend with a step buffer and a token feed
// (kernels.TokenFeeder), faithful to the CUDA backend's: CaptureStep runs
// fn once (a real capture's recording sets the logits tensor; ArgmaxFeed
// does nothing then), a Replay runs it again with the step buffer's token
// embedded, checks that every op runs at the step buffer's position, and
// ArgmaxFeed picks the token, writes it to the step buffer and advances
// the position, keeping the pick under its launch number (PostFed's
// ticket). Replays run at once, so FedToken never waits; the tests check
// what the host does around them. poison (≥ 0) is a position whose logits
// hold a NaN in every read. ring (> 0) makes it lose picks the way a ring
// of that many slots without the CUDA backend's harvest would: FedToken of
// a ticket that many launches old returns kernels.ErrFedLost (counted in
// lost).
type fakeFeeder struct {
	kernels.Backend
	on                   bool
	capturing, replaying bool
	stepTok              int32
	stepPos, curPos      int
	sets                 uint64
	picks                map[uint64]int32 // ArgmaxFeed's picks by launch
	posted               map[uint64]int32 // PostFed's, not yet read
	launched             uint64
	feeds, posts         int
	poison               int
	ring                 uint64
	lost                 int
	errs                 []error
}

func newFakeFeeder(b kernels.Backend, on bool) *fakeFeeder {
	return &fakeFeeder{Backend: b, on: on, picks: map[uint64]int32{}, posted: map[uint64]int32{}, poison: -1}
}

type fakeFedGraph struct {
	f  *fakeFeeder
	fn func() error
}

func (g *fakeFedGraph) Replay() error {
	g.f.replaying = true
	defer func() { g.f.replaying = false }()
	return g.fn()
}
func (g *fakeFedGraph) Close() error { return nil }

func (f *fakeFeeder) CaptureStep(fn func() error) (kernels.Graph, error) {
	f.capturing = true
	defer func() { f.capturing = false }()
	if err := fn(); err != nil {
		return nil, err
	}
	return &fakeFedGraph{f, fn}, nil
}

func (f *fakeFeeder) SetStep(ids []int32, pos0 int) error {
	f.sets++
	f.stepTok, f.stepPos = ids[0], pos0
	return nil
}

func (f *fakeFeeder) Embedding(out, table *runtime.Tensor, ids []int32) error {
	if f.replaying {
		ids = []int32{f.stepTok}
	}
	return f.Backend.Embedding(out, table, ids)
}

func (f *fakeFeeder) RoPE(x *runtime.Tensor, pos0 int, invFreq []float32) error {
	f.curPos = pos0
	if f.replaying && pos0 != f.stepPos {
		f.errs = append(f.errs, fmt.Errorf("a replay ran at position %d, the step buffer holds %d", pos0, f.stepPos))
	}
	return f.Backend.RoPE(x, pos0, invFreq)
}

func (f *fakeFeeder) ReadF32(dst []float32, x *runtime.Tensor) error {
	if err := f.Backend.ReadF32(dst, x); err != nil {
		return err
	}
	if f.curPos == f.poison {
		dst[0] = float32(math.NaN())
	}
	return nil
}

// hostArgmax is argmax_rows' rule: the first index of the largest value,
// −1 for a NaN or +Inf anywhere or only −Inf.
func hostArgmax(row []float32) int32 {
	best := int32(-1)
	for i, v := range row {
		if v != v || math.IsInf(float64(v), 1) {
			return -1
		}
		if !math.IsInf(float64(v), -1) && (best < 0 || v > row[best]) {
			best = int32(i)
		}
	}
	return best
}

func (f *fakeFeeder) ArgmaxRows(dst []int32, x *runtime.Tensor) error {
	V := x.Dim(-1)
	row := make([]float32, x.NumElements())
	if err := f.ReadF32(row, x); err != nil {
		return err
	}
	for r := range dst {
		dst[r] = hostArgmax(row[r*V : (r+1)*V])
	}
	return nil
}

func (f *fakeFeeder) FeedsTokens() bool { return f.on }
func (f *fakeFeeder) StepSets() uint64  { return f.sets }

func (f *fakeFeeder) ArgmaxFeed(x *runtime.Tensor) error {
	if f.capturing {
		return nil
	}
	row := make([]float32, x.NumElements())
	if err := f.ReadF32(row, x); err != nil {
		return err
	}
	id := hostArgmax(row)
	f.feeds++
	f.launched++
	f.picks[f.launched] = id
	f.stepTok, f.stepPos = max(id, 0), f.stepPos+1
	return nil
}

func (f *fakeFeeder) PostFed() (uint64, error) {
	id, ok := f.picks[f.launched]
	if !ok {
		return 0, fmt.Errorf("fakeFeeder.PostFed: ArgmaxFeed %d is posted already, or none ran", f.launched)
	}
	delete(f.picks, f.launched)
	f.posted[f.launched] = id
	f.posts++
	return f.launched, nil
}

func (f *fakeFeeder) FedToken(ticket uint64) (int32, error) {
	id, ok := f.posted[ticket]
	if !ok {
		return 0, fmt.Errorf("fakeFeeder.FedToken: ticket %d is not posted", ticket)
	}
	delete(f.posted, ticket)
	if f.ring > 0 && ticket+f.ring <= f.launched {
		f.lost++
		return 0, fmt.Errorf("fakeFeeder.FedToken: ticket %d overwritten by %d later picks: %w", ticket, f.launched-ticket, kernels.ErrFedLost)
	}
	return id, nil
}

var _ kernels.TokenFeeder = (*fakeFeeder)(nil)

// fedRun is one Generate's result: tokens, error text, the cache's length
// at the end, and the backend.
type fedRun struct {
	tokens []int32
	err    string
	cache  int
	f      *fakeFeeder
}

// TestGenerateFedMatchesSync: greedy Generate with the token feed on
// returns the tokens, error and final cache length of the same call with
// it off (the step-by-step loop over the same graphs) and of the plain
// CPU backend, when the generation ends by MaxNewTokens, a stop token, an
// EOS, OnToken's error, a cancelled Context, logits with a NaN (the
// pipeline falls back to the synchronous pick, whose error is unchanged),
// and when another caller's SetStep breaks the device chain; the fed path
// is taken (ArgmaxFeed ran), keeps a step in flight while OnToken runs and
// leaves nothing posted unread.
func TestGenerateFedMatchesSync(t *testing.T) {
	m, b, _ := loadTiny(t)
	prompt := []int32{5, 17, 42}
	ref, err := m.Generate(b, prompt, decoder.GenerateOptions{MaxNewTokens: 12, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	errStop := errors.New("enough")
	type tcase struct {
		name   string
		opt    decoder.GenerateOptions
		eos    []int
		poison int                              // position of NaN logits, −1 none
		hook   func(f *fakeFeeder, n int) error // OnToken's, with the tokens seen
		cancel int                              // cancel the Context after this many tokens (0: never)
	}
	cases := []tcase{
		{name: "max12", opt: decoder.GenerateOptions{MaxNewTokens: 12, IgnoreEOS: true}},
		{name: "max1", opt: decoder.GenerateOptions{MaxNewTokens: 1, IgnoreEOS: true}},
		{name: "max2", opt: decoder.GenerateOptions{MaxNewTokens: 2, IgnoreEOS: true}},
		{name: "stop", opt: decoder.GenerateOptions{MaxNewTokens: 12, StopTokens: []int32{ref[4]}}},
		{name: "stop-first", opt: decoder.GenerateOptions{MaxNewTokens: 12, StopTokens: []int32{ref[0]}}},
		{name: "eos", opt: decoder.GenerateOptions{MaxNewTokens: 12}, eos: []int{int(ref[6])}},
		{name: "ontoken-error", opt: decoder.GenerateOptions{MaxNewTokens: 12, IgnoreEOS: true},
			hook: func(_ *fakeFeeder, n int) error {
				if n == 3 {
					return errStop
				}
				return nil
			}},
		{name: "cancel", opt: decoder.GenerateOptions{MaxNewTokens: 12, IgnoreEOS: true}, cancel: 3},
		{name: "nan", opt: decoder.GenerateOptions{MaxNewTokens: 12, IgnoreEOS: true}, poison: len(prompt) + 5},
		{name: "chain-break", opt: decoder.GenerateOptions{MaxNewTokens: 12, IgnoreEOS: true},
			hook: func(f *fakeFeeder, n int) error {
				if n%3 == 1 {
					return f.SetStep([]int32{3}, 0) // another caller's step
				}
				return nil
			}},
	}
	for _, c := range cases {
		if c.poison == 0 {
			c.poison = -1
		}
		t.Run(c.name, func(t *testing.T) {
			run := func(bk kernels.Backend, f *fakeFeeder) fedRun {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				opt := c.opt
				opt.Context = ctx
				var seen []int32
				var inFlight []int // fed steps posted when OnToken ran, less the tokens seen
				opt.OnToken = func(id int32) error {
					seen = append(seen, id)
					if f != nil {
						inFlight = append(inFlight, f.posts-len(seen)+1)
					}
					if c.cancel > 0 && len(seen) == c.cancel {
						cancel()
					}
					if c.hook != nil && f != nil {
						return c.hook(f, len(seen))
					}
					if c.hook != nil {
						return c.hook(nil, len(seen))
					}
					return nil
				}
				saved := m.Cfg.EOSTokenIDs
				if c.eos != nil {
					m.Cfg.EOSTokenIDs = c.eos
				}
				defer func() { m.Cfg.EOSTokenIDs = saved }()
				var end int
				decoder.SetGenerateEnded(func(n int) { end = n })
				defer decoder.SetGenerateEnded(nil)
				got, err := m.Generate(bk, prompt, opt)
				if !slices.Equal(got, seen) {
					t.Errorf("returned %v, OnToken saw %v", got, seen)
				}
				r := fedRun{tokens: got, cache: end, f: f}
				if err != nil {
					r.err = err.Error()
				}
				if f != nil && f.on && len(f.errs) == 0 && c.poison < 0 && c.hook == nil && len(inFlight) > 1 {
					// One step ahead: each token but the last is delivered
					// with the next one's step already enqueued.
					for k, n := range inFlight[:len(inFlight)-1] {
						if n < 1 {
							t.Errorf("token %d delivered with %d steps in flight, want 1", k, n)
						}
					}
				}
				return r
			}
			sf := newFakeFeeder(b, false)
			sf.poison = c.poison
			want := run(sf, sf)
			ff := newFakeFeeder(b, true)
			ff.poison = c.poison
			got := run(ff, ff)
			var plain fedRun
			if c.poison < 0 && !(c.hook != nil && c.name == "chain-break") {
				plain = run(b, nil)
				if !slices.Equal(plain.tokens, want.tokens) || plain.err != want.err || plain.cache != want.cache {
					t.Errorf("graphs without the feed: %v %q cache %d; plain CPU: %v %q cache %d",
						want.tokens, want.err, want.cache, plain.tokens, plain.err, plain.cache)
				}
			}
			if !slices.Equal(got.tokens, want.tokens) || got.err != want.err || got.cache != want.cache {
				t.Errorf("fed: %v %q cache %d; step by step: %v %q cache %d",
					got.tokens, got.err, got.cache, want.tokens, want.err, want.cache)
			}
			if len(want.tokens) == 0 && c.opt.MaxNewTokens > 0 && c.poison < 0 {
				t.Errorf("no tokens")
			}
			for _, e := range append(sf.errs, ff.errs...) {
				t.Error(e)
			}
			if sf.feeds != 0 || sf.posts != 0 {
				t.Errorf("feed off: %d ArgmaxFeed runs, %d posts", sf.feeds, sf.posts)
			}
			if len(got.tokens) >= 2 && ff.posts == 0 {
				t.Errorf("feed on: no fed step ran for %d tokens", len(got.tokens))
			}
			if len(ff.posted) != 0 {
				t.Errorf("feed on: steps at positions %v posted and never read", ff.posted)
			}
		})
	}
	// The cases end where they should.
	if n := slices.Index(ref, ref[4]) + 1; n > 12 {
		t.Fatalf("bad reference %v", ref)
	}
}

// TestGenerateFedNeedsGreedy: sampled decoding, Eager and a switched-off
// feed never touch the token feed.
func TestGenerateFedNeedsGreedy(t *testing.T) {
	m, b, _ := loadTiny(t)
	for _, opt := range []decoder.GenerateOptions{
		{MaxNewTokens: 5, IgnoreEOS: true, Sampling: kernels.SampleParams{Temperature: 0.8}, Seed: 1},
		{MaxNewTokens: 5, IgnoreEOS: true, Eager: true},
	} {
		f := newFakeFeeder(b, true)
		want, err := m.Generate(b, []int32{1, 2, 3}, opt)
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.Generate(f, []int32{1, 2, 3}, opt)
		if err != nil {
			t.Fatal(err)
		}
		if f.feeds != 0 || f.posts != 0 {
			t.Errorf("%+v: %d ArgmaxFeed runs, %d posts", opt.Sampling, f.feeds, f.posts)
		}
		if opt.Sampling.Temperature == 0 && !slices.Equal(got, want) {
			t.Errorf("eager: %v, plain %v", got, want)
		}
		if len(got) != 5 {
			t.Errorf("%d tokens, want 5", len(got))
		}
	}
}

// TestGenerateFedStop: a Stop of the model from OnToken, with the next
// step in flight, ends Generate with the tokens so far and an error
// wrapping ErrClosed, as in the step-by-step loop; the step in flight is
// drained (read) before the cache is freed.
func TestGenerateFedStop(t *testing.T) {
	run := func(on bool) ([]int32, error, *fakeFeeder) {
		m, b, _ := loadTiny(t)
		f := newFakeFeeder(b, on)
		n := 0
		got, err := m.Generate(f, []int32{5, 17, 42}, decoder.GenerateOptions{MaxNewTokens: 10, IgnoreEOS: true,
			OnToken: func(int32) error {
				if n++; n == 3 {
					m.Stop()
				}
				return nil
			}})
		return got, err, f
	}
	want, werr, _ := run(false)
	got, gerr, f := run(true)
	if !errors.Is(werr, decoder.ErrClosed) || !errors.Is(gerr, decoder.ErrClosed) {
		t.Fatalf("errors: fed %v, step by step %v; want ErrClosed", gerr, werr)
	}
	if !slices.Equal(got, want) || len(got) != 3 || gerr.Error() != werr.Error() {
		t.Errorf("fed: %v %v; step by step: %v %v", got, gerr, want, werr)
	}
	if f.posts == 0 || len(f.posted) != 0 {
		t.Errorf("fed: %d steps posted, %v never read", f.posts, f.posted)
	}
}

// TestGenerateFedStallBesideOthers: a fed Generate whose OnToken stalls
// while another fed Generate on the same model and backend runs many steps
// (more launches than the feed's ring holds, a longer prompt that grows
// the workspace so the first one's graph is recorded again) returns every
// token of its lone run, without an error, on a feed that keeps its picks
// and on one that loses the stalled step's pick (the step runs again
// synchronously); the other Generates return their lone runs too.
func TestGenerateFedStallBesideOthers(t *testing.T) {
	m, b, _ := loadTiny(t)
	promptA := []int32{5, 17, 42}
	promptB := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	optA := decoder.GenerateOptions{MaxNewTokens: 8, IgnoreEOS: true}
	optB := decoder.GenerateOptions{MaxNewTokens: 12, IgnoreEOS: true}
	refA, err := m.Generate(b, promptA, optA)
	if err != nil {
		t.Fatal(err)
	}
	refB, err := m.Generate(b, promptB, optB)
	if err != nil {
		t.Fatal(err)
	}
	for _, ring := range []uint64{0, 4} {
		t.Run(fmt.Sprintf("ring%d", ring), func(t *testing.T) {
			f := newFakeFeeder(b, true)
			f.ring = ring
			var others [][]int32
			var otherErrs []error
			n := 0
			opt := optA
			opt.OnToken = func(int32) error {
				if n++; n == 2 || n == 5 { // stall: another Generate runs to its end meanwhile
					done := make(chan struct{})
					go func() {
						defer close(done)
						got, err := m.Generate(f, promptB, optB)
						others, otherErrs = append(others, got), append(otherErrs, err)
					}()
					<-done
				}
				return nil
			}
			got, err := m.Generate(f, promptA, opt)
			if err != nil || !slices.Equal(got, refA) {
				t.Errorf("stalled Generate: %v %v, alone %v", got, err, refA)
			}
			if len(others) != 2 {
				t.Fatalf("%d other Generates ran, want 2", len(others))
			}
			for k, o := range others {
				if otherErrs[k] != nil || !slices.Equal(o, refB) {
					t.Errorf("other Generate %d: %v %v, alone %v", k, o, otherErrs[k], refB)
				}
			}
			for _, e := range f.errs {
				t.Error(e)
			}
			if f.posts == 0 || len(f.posted) != 0 {
				t.Errorf("%d steps posted, %v never read", f.posts, f.posted)
			}
			if ring > 0 && f.lost == 0 {
				t.Errorf("ring of %d: no pick was lost, so the rerun was not tested", ring)
			}
			if ring == 0 && f.lost != 0 {
				t.Errorf("%d picks lost without a ring", f.lost)
			}
		})
	}
}

// TestGenerateFedInterleaved: two fed Generates running at once on one
// model and backend (their steps interleave under the forward lock, each
// breaking the other's device chain and, with the longer prompt, growing
// the workspace) each return their lone run's tokens; nothing posted is
// left unread.
func TestGenerateFedInterleaved(t *testing.T) {
	m, b, _ := loadTiny(t)
	prompts := [][]int32{{5, 17, 42}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}
	opt := decoder.GenerateOptions{MaxNewTokens: 16, IgnoreEOS: true}
	refs := make([][]int32, len(prompts))
	for i, p := range prompts {
		r, err := m.Generate(b, p, opt)
		if err != nil {
			t.Fatal(err)
		}
		refs[i] = r
	}
	f := newFakeFeeder(b, true)
	got := make([][]int32, len(prompts))
	errs := make([]error, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := opt
			o.OnToken = func(int32) error { goruntime.Gosched(); return nil }
			got[i], errs[i] = m.Generate(f, p, o)
		}()
	}
	wg.Wait()
	for i := range prompts {
		if errs[i] != nil || !slices.Equal(got[i], refs[i]) {
			t.Errorf("Generate %d: %v %v, alone %v", i, got[i], errs[i], refs[i])
		}
	}
	for _, e := range f.errs {
		t.Error(e)
	}
	if f.posts == 0 || len(f.posted) != 0 {
		t.Errorf("%d steps posted, %v never read", f.posts, f.posted)
	}
}
