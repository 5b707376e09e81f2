package session_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/session"
)

// shardFixtures are the fixture checkpoints of every family (and the FP8
// per-channel one) that a sharded model must reproduce.
// The MoE ones (tiny-mixtral, tiny-qwen3moe) shard by experts.
var shardFixtures = []string{"tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-mistral", "tiny-llama-fp8-channel", "tiny-mixtral", "tiny-qwen3moe"}

// shardRun is what the sharded and single-device models are compared on:
// every prompt position's logits, a prefill then decode steps' logits over
// one KV cache, and Generate's greedy tokens.
type shardRun struct {
	all    []float32
	steps  [][]float32
	greedy []int32
}

func runShardCase(t *testing.T, s *session.Session) shardRun {
	t.Helper()
	return runModelCase(t, s.Model, s.Backend)
}

func runModelCase(t *testing.T, m *decoder.Model, b kernels.Backend) shardRun {
	t.Helper()
	prompt := []int32{1, 17, 42, 9, 33, 5, 27}
	var r shardRun
	r.all = testmodel.Forward(t, m, b, prompt, true)
	r.steps = testmodel.Run(t, m, b, prompt[:3], 6)
	var err error
	r.greedy, err = m.Generate(b, prompt, decoder.GenerateOptions{MaxNewTokens: 10, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func maxAbs(got, want []float32) float64 {
	var m float64
	for i := range want {
		m = max(m, math.Abs(float64(got[i])-float64(want[i])))
	}
	return m
}

// closeTo fails t unless got and want agree within 1e-5 (absolute, plus
// 1e-5 relative to want).
func closeTo(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d logits, want %d", what, len(got), len(want))
	}
	for i := range want {
		if d := math.Abs(float64(got[i]) - float64(want[i])); d > 1e-5+1e-5*math.Abs(float64(want[i])) {
			t.Fatalf("%s: logit %d is %g, single device %g (max diff %.3g)", what, i, got[i], want[i], maxAbs(got, want))
		}
	}
}

// TestShardedEqualsSingleDevice: every fixture family cut over 2 and 4 CPU
// devices (tensor parallelism with the in-process all-reduce), resident
// and with every shard offloaded (everything streamed, and a budget that
// keeps some layers resident), gives the single-device logits within 1e-5
// and the same greedy tokens.
func TestShardedEqualsSingleDevice(t *testing.T) {
	for _, fx := range shardFixtures {
		moe := strings.Contains(fx, "mixtral") || strings.Contains(fx, "moe")
		t.Run(fx, func(t *testing.T) {
			dir := "../testdata/" + fx
			one, err := session.Open(dir, "cpu", session.Options{})
			if err != nil {
				t.Fatal(err)
			}
			want := runShardCase(t, one)
			if err := one.Close(); err != nil {
				t.Fatal(err)
			}
			for _, n := range []int{2, 4} {
				devs := make([]string, n)
				for i := range devs {
					devs[i] = fmt.Sprintf("cpu:%d", i)
				}
				partial := "" // set by the "0" run: room for one transfer slot and a resident layer
				for _, budget := range []string{"", "0", "partial"} {
					if budget == "partial" {
						if partial == "" {
							t.Fatal("no partial budget: the everything-streamed run failed")
						}
						budget = partial
					}
					t.Run(fmt.Sprintf("n%d-budget%q", n, budget), func(t *testing.T) {
						opts := session.Options{GPUBudget: budget}
						if budget == partial {
							opts.TransferBlocks = 1
						}
						s, err := session.Open(dir, strings.Join(devs, ","), opts)
						if err != nil {
							t.Fatal(err)
						}
						if len(s.Devices) != n || len(s.Model.Shards()) != n || s.Device.Name() != "cpu:0" {
							t.Fatalf("%d devices, %d shards, rank 0 on %s", len(s.Devices), len(s.Model.Shards()), s.Device.Name())
						}
						for i, sh := range s.Model.Shards() {
							if sh.Cfg.NumAttentionHeads != 4/n || sh.Cfg.NumKeyValueHeads != max(2/n, 1) {
								t.Fatalf("shard %d config %s", i, sh.Cfg.Summary())
							}
						}
						got := runShardCase(t, s)
						closeTo(t, "all positions", got.all, want.all)
						for i := range want.steps {
							closeTo(t, fmt.Sprintf("step %d", i), got.steps[i], want.steps[i])
						}
						if !slices.Equal(got.greedy, want.greedy) {
							t.Errorf("greedy tokens %v, single device %v", got.greedy, want.greedy)
						}
						if budget != "" {
							if len(s.Managers) != n {
								t.Fatalf("%d offload managers for %d devices", len(s.Managers), n)
							}
							if budget == "0" {
								in, err := offload.GetOffloadManager(s.Managers[0]).PlanInput()
								if err != nil {
									t.Fatal(err)
								}
								var unit int64
								for _, u := range in.Units {
									unit = max(unit, u.Bytes)
								}
								partial = fmt.Sprintf("%dB", in.Budget+unit/8)
							}
							for i, name := range s.Managers {
								m := offload.GetOffloadManager(name)
								if p := m.Phase(); p != offload.PhaseInference {
									t.Errorf("rank %d: phase %v after the runs", i, p)
								}
								if len(offload.OffloadUnits(name)) == 0 {
									t.Errorf("rank %d: no layer streams under budget %q", i, budget)
								}
								plan, err := m.Plan()
								if err != nil {
									t.Fatal(err)
								}
								if res := slices.Index(plan.Resident, true) >= 0; res != (budget != "0") && !moe {
									t.Errorf("rank %d, budget %q: some layer resident %v", i, budget, res)
								}
								// An MoE rank's units are its own experts (and attention), and
								// its experts stream; units smaller than the slots may be kept
								// resident beside them even under "0".
								if moe {
									in, err := m.PlanInput()
									if err != nil {
										t.Fatal(err)
									}
									var experts, streamed int
									for j, u := range in.Units {
										if strings.Contains(u.Name, ".experts.") {
											experts++
											if !plan.Resident[j] {
												streamed++
											}
										}
									}
									E := s.Model.Cfg.MoE.Experts
									if want := s.Model.Cfg.NumHiddenLayers * E / n; experts != want {
										t.Errorf("rank %d: %d expert units, want %d (%d layers of %d/%d experts)", i, experts, want, s.Model.Cfg.NumHiddenLayers, E, n)
									}
									if streamed == 0 {
										t.Errorf("rank %d, budget %q: none of its %d experts streams", i, budget, experts)
									}
								}
							}
						}
						if err := s.Close(); err != nil {
							t.Fatal(err)
						}
					})
				}
			}
		})
	}
}

// TestParseDevices: lists, and the lists refused with a reason.
func TestParseDevices(t *testing.T) {
	for in, want := range map[string][]string{
		"cpu":                {"cpu"},
		"cuda:1":             {"cuda:1"},
		"cuda:0,cuda:1":      {"cuda:0", "cuda:1"},
		"cpu:0, cpu:1,cpu:2": {"cpu:0", "cpu:1", "cpu:2"},
	} {
		got, err := session.ParseDevices(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseDevices(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"cuda:0,cuda:0": "names cuda:0 twice",
		"cuda,cuda:0":   "names cuda:0 (as cuda and cuda:0) twice",
		"cpu:0,cuda:1":  "mixes CPU and GPU",
		"cpu,cpu:1":     "name the CPU devices",
		"cuda:0,tpu":    "unknown device",
		"cuda:0,":       "unknown device",
	} {
		if _, err := session.ParseDevices(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseDevices(%q) = %v, want an error with %q", in, err, want)
		}
	}
}

// TestShardedOpenErrors: what a sharded model cannot do is refused before
// anything runs, naming the cause.
func TestShardedOpenErrors(t *testing.T) {
	for _, c := range []struct {
		dir, device string
		opts        session.Options
		want        string
	}{
		{"../testdata/tiny-llama", "cpu:0,cpu:1,cpu:2", session.Options{}, "4 attention heads do not split evenly over 3 devices"},
		{"../testdata/tiny-llama-fp8-block", "cpu:0,cpu:1", session.Options{}, "do not align to the FP8 scale blocks of 64"},
		{"../testdata/tiny-llama", "cpu:0,cpu:1", session.Options{UnitGraphs: true, GPUBudget: "0"}, "unit graphs"},
		{"../testdata/tiny-llama", "cpu:0,cpu:1", session.Options{ProfileDir: t.TempDir()}, "profile"},
	} {
		s, err := session.Open(c.dir, c.device, c.opts)
		if err == nil {
			s.Close()
			t.Errorf("%s on %s: opened", c.dir, c.device)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s on %s: %v, want an error with %q", c.dir, c.device, err, c.want)
		}
	}
	// An MoE model opens sharded by experts (once refused here): each shard
	// holds only its experts' parameters, the router whole.
	moe, err := session.Open("../testdata/tiny-mixtral", "cpu:0,cpu:1", session.Options{})
	if err != nil {
		t.Fatalf("tiny-mixtral over 2 devices: %v", err)
	}
	for r, sh := range moe.Model.Shards() {
		shapes := sh.ParamShapes()
		for e := 0; e < 8; e++ {
			_, ok := shapes[fmt.Sprintf("model.layers.0.block_sparse_moe.experts.%d.w1.weight", e)]
			if want := e/4 == r; ok != want {
				t.Errorf("shard %d holds expert %d: %v, want %v", r, e, ok, want)
			}
		}
		if got := shapes["model.layers.0.block_sparse_moe.gate.weight"]; len(got) != 2 || got[0] != 8 {
			t.Errorf("shard %d router %v, want all 8 experts' rows", r, got)
		}
	}
	if err := moe.Close(); err != nil {
		t.Fatal(err)
	}
	// A sharded model's batched path says it is not implemented.
	s, err := session.Open("../testdata/tiny-llama", "cpu:0,cpu:1", session.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Model.NewPagedCache(s.Backend, 8, 0); err == nil || !strings.Contains(err.Error(), "sharded") {
		t.Fatalf("paged cache: %v", err)
	}
}
