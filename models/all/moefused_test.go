package all_test

import (
	"encoding/json"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/nn"
)

// realishMoE writes a random Qwen3-MoE checkpoint of Qwen3-30B-A3B's
// proportions cut small (2 layers, hidden 256, 64 experts of 96, top 8,
// renormalised, 4 heads of 64 over 2 KV heads) and returns its directory.
func realishMoE(t *testing.T) string {
	t.Helper()
	return realish(t, "qwen3-30b-a3b", "realish qwen3-moe", 11, func(c map[string]any) {
		for k, v := range map[string]any{"hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
			"head_dim": 64, "moe_intermediate_size": 96, "vocab_size": 512, "max_position_embeddings": 256,
			"bos_token_id": 0, "eos_token_id": 1} {
			c[k] = v
		}
		for _, k := range []string{"num_experts", "num_local_experts"} {
			if _, ok := c[k]; ok {
				c[k] = 64
			}
		}
	})
}

// realish writes a random checkpoint (seed) of the make-model shape's
// config.json cut to 2 layers and changed by edit, and returns its
// directory.
func realish(t *testing.T, shape, name string, seed uint64, edit func(map[string]any)) string {
	t.Helper()
	f, data, err := models.ShapeConfig(shape, 2)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	edit(c)
	if data, err = json.Marshal(c); err != nil {
		t.Fatal(err)
	}
	m, err := f.New(data, name)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), strings.ReplaceAll(name, " ", "-"))
	if err := decoder.WriteRandomCheckpoint(dir, m, data, seed, 1<<30); err != nil {
		t.Fatal(err)
	}
	return dir
}

// blockSpy watches only the expert blocks (nn.Watcher), so their experts
// may fuse; it counts the expert forwards and announcements it sees.
type blockSpy struct {
	experts, announced int
	watchExperts       bool // watch the experts too: they must then run one by one
}

func (s *blockSpy) Watches(m nn.Module) bool {
	switch m.(type) {
	case *decoder.MoEBlock:
		return true
	case *decoder.MLP:
		return s.watchExperts && strings.Contains(m.Node().Name(), ".experts.")
	}
	return false
}

func (s *blockSpy) Enter(m nn.Module) error {
	if _, ok := m.(*decoder.MLP); ok && strings.Contains(m.Node().Name(), ".experts.") {
		s.experts++
	}
	return nil
}

func (s *blockSpy) Exit(_ nn.Module, err error) error { return err }

func (s *blockSpy) Announce(nn.Module, []nn.Module) { s.announced++ }

// TestMoEFusedEveryDevice: on every device, both MoE fixtures and a
// random model of Qwen3-30B-A3B's proportions give the same logits through
// the fused expert path (kernels.MoEFused: device routing, one launch for
// the routed experts' gate·up, one for their weighted down projections) as
// expert by expert (Model.MoEFusedTokens −1), within 1e-5 on the CPU and
// the device's tolerance on a GPU, for a prefill of 20 tokens (per expert
// either way), a fused prefill of 5 and teacher-forced decode steps; the
// same greedy tokens (every model on the CPU, the fixtures on a GPU); a
// hook watching only the blocks sees no expert forward on the fused path,
// one watching the experts sees them announced and run; and where the
// backend captures graphs, decode steps replayed from a captured whole
// step (CaptureDecode) equal the eager fused steps.
func TestMoEFusedEveryDevice(t *testing.T) {
	realish := realishMoE(t)
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		tol := d.Tol
		if d.Kind() == devtest.NewCPU(t).Kind() {
			tol = devtest.Tol{Abs: 1e-5}
		}
		for _, c := range []struct{ name, dir string }{{"mixtral", moeFixtures[0].dir}, {"qwen3_moe", moeFixtures[1].dir}, {"realish", realish}} {
			t.Run(c.name, func(t *testing.T) {
				m := load(t, c.dir, d.Dev)
				b := d.Backend
				if _, ok := kernels.MoEFusedOf(b); !ok {
					t.Fatalf("the %T backend has no fused expert ops", b)
				}
				V := m.Cfg.VocabSize
				rng := rand.New(rand.NewPCG(5, uint64(len(c.name))))
				tokens := func(n int) []int32 {
					ids := make([]int32, n)
					for i := range ids {
						ids[i] = int32(2 + rng.IntN(V-2))
					}
					return ids
				}
				const steps = 6
				cont := tokens(steps)
				forced := func(s int, _ []float32) int32 { return cont[s] }
				run := func(fusedTokens int, prompt []int32) [][]float32 {
					m.MoEFusedTokens = fusedTokens
					cache, err := m.NewKVCache(b, len(prompt)+steps)
					if err != nil {
						t.Fatal(err)
					}
					defer cache.Free()
					out, err := testmodel.Steps(m, b, cache, prompt, steps, forced)
					if err != nil {
						t.Fatal(err)
					}
					return out
				}
				for _, prompt := range [][]int32{tokens(20), tokens(5)} {
					want, got := run(-1, prompt), run(0, prompt)
					for s := range want {
						if !devtest.Close(t, got[s], want[s], tol.Abs, tol.Rel) {
							t.Errorf("prompt of %d, forward %d: fused logits differ from per-expert by %.3g", len(prompt), s, maxDiff(got[s], want[s]))
						}
					}
				}

				// Hooks: watching the blocks only, the decode steps fuse;
				// watching the experts, every step runs them one by one.
				L := 0
				for _, l := range m.Layers {
					if l.MoE != nil {
						L++
					}
				}
				for _, watch := range []bool{false, true} {
					spy := &blockSpy{watchExperts: watch}
					remove := m.Node().Tree().AddHook(spy)
					cache, err := m.NewKVCache(b, 24)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := testmodel.Steps(m, b, cache, tokens(20), 0, forced); err != nil {
						t.Fatal(err)
					}
					// The last layer's block takes the prefill's last row alone
					// (models/decoder/lastrows.go): a one-token block, fused as a
					// decode step's unless the experts are watched.
					e0, a0 := spy.experts, spy.announced
					wantA := L
					if !watch {
						wantA = L - 1
					}
					if e0 < wantA*m.Cfg.MoE.TopK || a0 != wantA {
						t.Errorf("watch experts %v: the 20-token prefill ran %d experts, %d announcements (want ≥ %d, %d)", watch, e0, a0, wantA*m.Cfg.MoE.TopK, wantA)
					}
					if _, err := m.Forward(b, cache, cont[:1], false); err != nil {
						t.Fatal(err)
					}
					cache.Free()
					remove()
					e, a := spy.experts-e0, spy.announced-a0
					if watch && (e != L*m.Cfg.MoE.TopK || a != L) {
						t.Errorf("experts watched: a decode step ran %d experts and %d announcements, want %d and %d", e, a, L*m.Cfg.MoE.TopK, L)
					}
					if !watch && (e != 0 || a != 0) {
						t.Errorf("blocks watched: a decode step ran %d experts and %d announcements, want none (fused)", e, a)
					}
				}

				// Greedy generation: the same tokens both ways.
				m.MoEFusedTokens = 0
				prompt := tokens(12)
				if c.name != "realish" || d.Kind() == devtest.NewCPU(t).Kind() {
					var outs [][]int32
					for _, ft := range []int{-1, 0} {
						m.MoEFusedTokens = ft
						for _, eager := range []bool{true, false} {
							out, err := m.Generate(b, prompt, decoder.GenerateOptions{MaxNewTokens: 8, IgnoreEOS: true, Eager: eager})
							if err != nil {
								t.Fatal(err)
							}
							outs = append(outs, out)
						}
					}
					for i := 1; i < len(outs); i++ {
						if !slices.Equal(outs[i], outs[0]) {
							t.Errorf("greedy continuations differ: %v", outs)
							break
						}
					}
					m.MoEFusedTokens = 0
				}

				// A captured whole decode step against the eager one.
				if _, ok := b.(kernels.StepCapturer); !ok {
					return
				}
				eager := run(0, prompt)
				cache, err := m.NewKVCache(b, len(prompt)+steps)
				if err != nil {
					t.Fatal(err)
				}
				defer cache.Free()
				if _, err := m.Forward(b, cache, prompt, false); err != nil {
					t.Fatal(err)
				}
				g, err := m.CaptureDecode(b, cache)
				if err != nil {
					t.Fatal(err)
				}
				defer g.Close()
				for s := 0; s < steps; s++ {
					lt, err := g.Step(cont[s])
					if err != nil {
						t.Fatal(err)
					}
					got, err := testmodel.ReadLogits(b, lt)
					if err != nil {
						t.Fatal(err)
					}
					if !devtest.Close(t, got, eager[s+1], tol.Abs, tol.Rel) {
						t.Errorf("graph step %d differs from the eager step by %.3g", s, maxDiff(got, eager[s+1]))
					}
				}
				m.MoEFusedTokens = -1
				if _, err := m.CaptureDecode(b, cache); err == nil || !strings.Contains(err.Error(), "routes tokens to experts on the host") {
					t.Errorf("capturing a step that routes on the host (MoEFusedTokens −1): %v", err)
				}
				m.MoEFusedTokens = 0
			})
		}
	})
}
