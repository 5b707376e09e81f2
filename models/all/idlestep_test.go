package all_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// replayBackend is the CPU backend (all its ops, the optional ones too)
// made a kernels.StepCapturer that behaves
// as the CUDA backend's graphs do for the decoder: a capture runs the step
// once (a real capture's recording hands back the logits tensor) and keeps
// it; a replay runs it again with the token SetStep gave instead of the
// capture's (the position is the cache's, which the caller keeps at the
// step's). So a replayed step computes what an eager one computes, through
// the replay's code path.
type replayBackend struct {
	*kernels.CPUBackend
	replaying bool
	stepTok   int32
	fail      bool // every capture fails
	attempts  int  // captures tried
}

type replayGraph struct {
	b  *replayBackend
	fn func() error
}

func (r *replayGraph) Replay() error {
	r.b.replaying = true
	defer func() { r.b.replaying = false }()
	return r.fn()
}

func (r *replayGraph) Close() error { return nil }

func (b *replayBackend) CaptureStep(fn func() error) (kernels.Graph, error) {
	b.attempts++
	if b.fail {
		return nil, errors.New("test: the capture fails")
	}
	if err := fn(); err != nil {
		return nil, err
	}
	return &replayGraph{b, fn}, nil
}

func (b *replayBackend) SetStep(ids []int32, pos0 int) error {
	b.stepTok = ids[0]
	return nil
}

func (b *replayBackend) Embedding(out, table *runtime.Tensor, ids []int32) error {
	if b.replaying {
		ids = []int32{b.stepTok}
	}
	return b.CPUBackend.Embedding(out, table, ids)
}

// TestIdleStepGraph: an offloaded model whose plan keeps every layer
// resident replays its one-token forwards from one recorded step (the
// engine's traps of the layers have nothing to do), with the logits of the
// resident model bit for bit over three greedy runs (a new KV cache each:
// a new recording each). A plan that streams layers, a measured pass
// (offload timing on) and NoIdleStepGraph run every step eagerly, with the
// same logits; so does a backend whose recordings fail, tried once a KV
// cache, the failure kept for IdleStepErr.
func TestIdleStepGraph(t *testing.T) {
	const dir = "../../testdata/tiny-qwen3"
	prompt := []int32{5, 17, 42, 3, 9, 11}
	const steps, runs = 8, 3
	host, hb := cpu(t)
	want := testmodel.Run(t, load(t, dir, host), hb, prompt, steps)

	probe := load(t, dir, host)
	var unit, total int64
	for _, p := range nn.Parameters(probe) {
		total += (p.Peek().NumBytes() + 255) / 256 * 256
	}
	for _, l := range probe.Layers {
		var n int64
		for _, p := range nn.Parameters(l) {
			n += (p.Peek().NumBytes() + 255) / 256 * 256
		}
		unit = max(unit, n)
	}
	fixed := total - int64(len(probe.Layers))*unit // every layer has the same size
	cases := []struct {
		name    string
		budget  int64
		timing  offload.TimingMode
		noGraph bool
		fail    bool
		replay  bool
	}{
		{"all resident", total, offload.TimingOff, false, false, true},
		{"streamed", fixed + 2*unit, offload.TimingOff, false, false, false},
		{"timed", total, offload.TimingEager, false, false, false},
		{"switched off", total, offload.TimingOff, true, false, false},
		{"recording fails", total, offload.TimingOff, false, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := runtime.NewCPU(0)
			defer dev.Close()
			cb, err := kernels.NewCPUBackend(dev)
			if err != nil {
				t.Fatal(err)
			}
			m := load(t, dir, host)
			m.NoIdleStepGraph = c.noGraph
			name := fmt.Sprintf("%s-%d", t.Name(), c.budget)
			cfg := offload.DefaultConfig(dev)
			cfg.GPUBudget = offload.Budget{Bytes: c.budget}
			cfg.TransferBlocks = 2
			cfg.OffloadTiming = c.timing
			if err := offload.Offload(m, &cfg, name); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := offload.Release(name, true); err != nil {
					t.Error(err)
				}
			}()
			rb := &replayBackend{CPUBackend: cb, fail: c.fail}
			for r := 0; r < runs; r++ {
				got := testmodel.Run(t, m, rb, prompt, steps)
				for i := range want {
					if !slices.Equal(got[i], want[i]) {
						t.Fatalf("run %d, pass %d: logits differ from the resident model's by %.3g", r, i, maxDiff(got[i], want[i]))
					}
				}
			}
			if p := offload.GetOffloadManager(name).Phase(); p != offload.PhaseInference {
				t.Fatalf("engine in %v after %d runs", p, runs)
			}
			streamed := len(offload.OffloadUnits(name))
			if (c.budget < total) != (streamed > 0) {
				t.Fatalf("budget %d of %d: %d layers stream", c.budget, total, streamed)
			}
			captures, replays := m.IdleStepCounts()
			if c.fail {
				// One try a KV cache (a run), every step eager, the reason kept.
				if err := m.IdleStepErr(); rb.attempts != runs || err == nil || !strings.Contains(err.Error(), "the capture fails") {
					t.Errorf("failing recordings: %d tried over %d runs, error %v; want one a run and the capture's error", rb.attempts, runs, err)
				}
			} else if err := m.IdleStepErr(); err != nil {
				t.Errorf("IdleStepErr: %v", err)
			}
			if !c.replay {
				if captures != 0 || replays != 0 {
					t.Errorf("%d recordings and %d replays; want every step eager", captures, replays)
				}
				return
			}
			// The last run's steps all replay (the first runs' early passes
			// are the engine's discovery and profiling): one recording a run
			// that replays.
			if replays < steps || captures < 1 || captures > runs {
				t.Errorf("%d recordings and %d replays over %d runs of %d steps; want the last run's %d steps replayed, at most one recording a run",
					captures, replays, runs, steps, steps)
			}
		})
	}
}

var _ kernels.StepCapturer = (*replayBackend)(nil)
