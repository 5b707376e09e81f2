package decoder_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/decoder"
)

// concurrentRequests are prompts of different lengths (so that a long
// prompt's forward grows the workspace between a short one's steps) with
// greedy and sampled settings.
func concurrentRequests() []struct {
	prompt []int32
	opt    decoder.GenerateOptions
} {
	return []struct {
		prompt []int32
		opt    decoder.GenerateOptions
	}{
		{[]int32{1, 2, 3}, decoder.GenerateOptions{MaxNewTokens: 12, IgnoreEOS: true}},
		{[]int32{5, 17, 42, 9, 33, 61, 7, 8, 100, 2, 3, 4, 90, 91, 92, 93, 11, 12, 13}, decoder.GenerateOptions{MaxNewTokens: 9, IgnoreEOS: true}},
		{[]int32{7, 7}, decoder.GenerateOptions{MaxNewTokens: 10, IgnoreEOS: true, Seed: 3, Sampling: kernels.SampleParams{Temperature: 0.9, TopK: 20}}},
		{[]int32{40, 41, 42, 43, 44, 45, 46, 47}, decoder.GenerateOptions{MaxNewTokens: 8, IgnoreEOS: true}},
	}
}

// runCapturer is a capturing backend for Generate on the CPU: its capture
// runs the step once (as a real capture's recording sets the logits
// tensor) and a replay runs it again. Its SetStep does nothing, so a
// replayed step embeds the capture's token id, not the new one: the
// tokens differ from an eager Generate's, but they are as deterministic,
// which is what comparing concurrent with lone calls needs.
type runCapturer struct {
	kernels.Backend
}

func (f *runCapturer) CaptureStep(fn func() error) (kernels.Graph, error) {
	if err := fn(); err != nil {
		return nil, err
	}
	return &fakeGraph{fn}, nil
}

func (f *runCapturer) SetStep(ids []int32, pos0 int) error { return nil }

// TestConcurrentGenerate: N goroutines × M Generate calls on one model each
// return the tokens the same call returns alone. Before the model had a
// forward lock, every goroutine's forward ran in the one workspace and
// the tokens came out wrong without an error (and -race reported the
// workspace). Run eagerly and through a capturing backend (each Generate's
// decode graph, recaptured when another's longer prompt grew the
// workspace between two of its steps).
func TestConcurrentGenerate(t *testing.T) {
	for _, graphs := range []bool{false, true} {
		name := "eager"
		if graphs {
			name = "graphs"
		}
		t.Run(name, func(t *testing.T) {
			// The lone calls run on a model of their own, so that the shared
			// one starts with no workspace and the long prompt grows it
			// while the others run.
			ref, rb, _ := loadTiny(t)
			m, b, _ := loadTiny(t)
			if graphs {
				rb, b = &runCapturer{Backend: rb}, &runCapturer{Backend: b}
			}
			reqs := concurrentRequests()
			want := make([][]int32, len(reqs))
			for i, r := range reqs {
				got, err := ref.Generate(rb, r.prompt, r.opt)
				if err != nil {
					t.Fatalf("request %d alone: %v", i, err)
				}
				want[i] = got
			}
			const goroutines, calls = 4, 3
			var wg sync.WaitGroup
			errs := make(chan error, goroutines*calls)
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for c := range calls {
						i := (g + c) % len(reqs)
						got, err := m.Generate(b, reqs[i].prompt, reqs[i].opt)
						switch {
						case err != nil:
							errs <- fmt.Errorf("goroutine %d call %d (request %d): %v", g, c, i, err)
						case !slices.Equal(got, want[i]):
							errs <- fmt.Errorf("goroutine %d call %d (request %d): tokens %v; alone %v", g, c, i, got, want[i])
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// TestGenerateContext: a Context done before Generate returns no tokens
// and an error wrapping its error; cancelled after the third token (from
// OnToken), Generate returns those three tokens, the same as alone, and an
// error wrapping context.Canceled.
func TestGenerateContext(t *testing.T) {
	m, b, _ := loadTiny(t)
	prompt := []int32{1, 2, 3}
	opt := decoder.GenerateOptions{MaxNewTokens: 10, IgnoreEOS: true}
	want, err := m.Generate(b, prompt, opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	opt.Context = ctx
	got, err := m.Generate(b, prompt, opt)
	if !errors.Is(err, context.Canceled) || len(got) != 0 {
		t.Errorf("Generate with a cancelled context: %v, %v; want no tokens and context.Canceled", got, err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	opt.Context = ctx
	n := 0
	opt.OnToken = func(int32) error {
		if n++; n == 3 {
			cancel()
		}
		return nil
	}
	got, err = m.Generate(b, prompt, opt)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Generate cancelled after 3 tokens: error %v; want context.Canceled", err)
	}
	if !slices.Equal(got, want[:3]) {
		t.Errorf("Generate cancelled after 3 tokens: tokens %v; want %v", got, want[:3])
	}
}

// TestCloseDuringGenerate: closing the model while a Generate runs in
// another goroutine waits for its step in progress; the Generate returns
// the tokens it chose (the start of its tokens alone) and an error wrapping
// ErrClosed, its KV cache is freed by Close (no device memory stays held),
// and the entry points afterwards return ErrClosed. Before, Close freed
// the weights under the running forward. "racing" closes as soon as the
// first token is out (Close mostly meets a forward in progress);
// "inOnToken" closes while the Generate sits in its OnToken after 4
// tokens, and waits there until Close has finished (then exactly those 4
// come back).
func TestCloseDuringGenerate(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   int
		wait bool
	}{{"racing", 1, false}, {"inOnToken", 4, true}} {
		t.Run(tc.name, func(t *testing.T) {
			m, b, dev := loadTiny(t)
			prompt := []int32{4, 5, 6}
			opt := decoder.GenerateOptions{MaxNewTokens: 60, IgnoreEOS: true}
			want, err := m.Generate(b, prompt, opt)
			if err != nil {
				t.Fatal(err)
			}
			var r struct {
				ids []int32
				err error
			}
			r.ids, r.err = testmodel.CloseDuringGenerate(func(o decoder.GenerateOptions) ([]int32, error) { return m.Generate(b, prompt, o) },
				opt, tc.at, tc.wait, m.Close)
			if !errors.Is(r.err, decoder.ErrClosed) {
				t.Errorf("Generate during Close: error %v; want decoder.ErrClosed", r.err)
			}
			if len(r.ids) < tc.at || len(r.ids) >= len(want) || !slices.Equal(r.ids, want[:len(r.ids)]) {
				t.Errorf("Generate during Close returned %d tokens %v; want at least %d, fewer than %d, the start of %v", len(r.ids), r.ids, tc.at, len(want), want)
			}
			if tc.wait && len(r.ids) != tc.at {
				t.Errorf("Generate closed in its OnToken after %d tokens returned %d", tc.at, len(r.ids))
			}
			if m := dev.Memory(); m.InUse != 0 {
				t.Errorf("device memory in use after Close: %d bytes in %d allocations; want none (the weights are mapped; workspace and the Generate's cache freed)", m.InUse, m.Count)
			}
			if _, err := m.Generate(b, prompt, opt); !errors.Is(err, decoder.ErrClosed) {
				t.Errorf("Generate after Close: %v; want decoder.ErrClosed", err)
			}
		})
	}
}
