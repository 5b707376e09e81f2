//go:build cuda

package generate_test

import (
	"errors"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/models/generate"
)

// TestSchedulerSoloGraphCUDA: on the device's backend, one greedy request
// through the scheduler gives the same 24 tokens with solo graph steps on
// as with them off, and a second request arriving after the first's 6th
// token (solo → batched → solo) gives both requests the tokens they get
// with solo graphs off; the graph steps are counted (on a capturing
// backend: 23 for the lone request, 5 + 26 for the pair; a lone request of
// 40 tokens whose solo cache fills and is entered again with twice the
// room gives its tokens too, at least 20 graph steps; tiny-qwen3moe's
// are logged, its experts replay only where the backend fuses them); Close
// in solo mode retires the request and returns every block. The CPU
// subtest runs it too (no capture there: no graph steps).
func TestSchedulerSoloGraphCUDA(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		for _, fx := range []struct{ name, dir string }{
			{"tiny-llama", "../../testdata/tiny-llama"},
			{"tiny-qwen3", "../../testdata/tiny-qwen3"},
			{"tiny-qwen3moe", "../../testdata/tiny-qwen3moe"},
		} {
			t.Run(fx.name, func(t *testing.T) {
				m, ck, err := models.Load(fx.dir, d.Dev)
				if err != nil {
					t.Fatal(err)
				}
				defer ck.Close()
				defer m.Close()
				_, capt := d.Backend.(kernels.StepCapturer)
				V := m.Cfg.VocabSize
				check := func(what string, got, want int64) {
					switch {
					case !capt && got != 0:
						t.Errorf("%s: %d graph steps on a backend that cannot capture", what, got)
					case capt && fx.name == "tiny-qwen3moe":
						t.Logf("%s: %d graph steps (%d if the experts replay)", what, got, want)
					case capt && got != want:
						t.Errorf("%s: %d graph steps, want %d", what, got, want)
					}
				}
				lone := soloRun{reqs: []generate.Request{{Prompt: prompt(V, 9, 1), MaxNewTokens: 24, IgnoreEOS: true}},
					at: []int{-1}, after: []int{0}, cancelAt: []int{0}, blocks: 64}
				_, on := lone.compare(t, m, d.Backend, func() {})
				check("one request", on.graph, 23)
				pair := soloRun{reqs: []generate.Request{
					{Prompt: prompt(V, 9, 1), MaxNewTokens: 48, IgnoreEOS: true},
					{Prompt: prompt(V, 5, 2), MaxNewTokens: 16, IgnoreEOS: true},
				}, at: []int{-1, 0}, after: []int{0, 6}, cancelAt: []int{0, 0}, blocks: 64}
				_, on = pair.compare(t, m, d.Backend, func() {})
				check("two requests", on.graph, 5+26)
				// A solo cache of about 20 positions (soloChunk 8, twice a
				// context of 10) fills after some 10 steps, is copied back and
				// entered again with twice the room; when that fills too, the
				// request has fewer than soloMinTokens left and ends batched
				// (s14c: 27 graph steps of 39). Without the re-entry it would
				// take about 10.
				restore := generate.SetSoloChunk(8)
				lone.reqs[0].MaxNewTokens = 40
				_, on = lone.compare(t, m, d.Backend, func() {})
				restore()
				if capt && fx.name != "tiny-qwen3moe" && on.graph < 20 {
					t.Errorf("a growing solo cache: %d graph steps of 39, want the re-entry's (at least 20)", on.graph)
				}
				t.Logf("a growing solo cache: %d graph steps of 39", on.graph)
				// Close in solo mode with a captured step: the request ends
				// cancelled with the tokens it had, every block comes back,
				// and Step then answers ErrSchedulerClosed.
				s, cache := newScheduler(t, m, d.Backend, 64, 4, generate.Options{SoloGraph: generate.SoloGraphOn})
				h := must(s.Submit(generate.Request{Prompt: prompt(V, 9, 1), MaxNewTokens: 100, IgnoreEOS: true}))
				for range 12 {
					if _, err := s.Step(); err != nil {
						t.Fatal(err)
					}
				}
				if capt && fx.name != "tiny-qwen3moe" && s.GraphSteps() == 0 {
					t.Error("12 steps of a lone request: no graph step before Close")
				}
				if err := s.Close(); err != nil {
					t.Fatalf("Close in solo mode: %v", err)
				}
				if r := h.Wait(); r.Finish != generate.FinishCancelled || len(r.Generated) == 0 || len(r.Generated) >= 100 {
					t.Errorf("Close in solo mode: request %s with %d tokens", r.Finish, len(r.Generated))
				}
				if cache.FreeBlocks() != cache.TotalBlocks() {
					t.Errorf("Close in solo mode: %d of %d blocks free", cache.FreeBlocks(), cache.TotalBlocks())
				}
				if _, err := s.Step(); !errors.Is(err, generate.ErrSchedulerClosed) {
					t.Errorf("Step after Close: %v", err)
				}
			})
		}
	})
}
