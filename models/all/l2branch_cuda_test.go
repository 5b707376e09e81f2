//go:build cuda

package all_test

import (
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/models/decoder"
)

// TestL2BranchDecodeGPU: on the tiny Llama, Qwen2 and FP8 (per-channel)
// Llama fixtures, with FT_L2_BRANCH's plans "all" (bulk prefetches, and
// per-line evict_last ones) and "o" (Backend.SetL2Branch), 16 greedy tokens
// after a prompt, eager and replaying the decode graph, and the logits of a
// prefill and six eager one-token steps and of 16 graph-replayed steps are
// bit for bit those with the plan off; the eager steps forked 3 prefetches
// ("all") or 1 ("o") a layer and step, the capture its layers' worth (so
// the graph holds the branch, and capturing it with the branch joined back
// works). A few seconds.
func TestL2BranchDecodeGPU(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		gb, ok := d.Backend.(*cudabackend.Backend)
		if !ok {
			t.Skipf("the L2 branch is the CUDA backend's; %s has none", d.Name)
		}
		saved := gb.L2Branch()
		defer func() {
			if err := gb.SetL2Branch(saved); err != nil {
				t.Error(err)
			}
		}()
		set := func(kinds string, mode int) {
			t.Helper()
			p, err := kernels.ParseL2Branch(kinds, "", "", "")
			if err != nil {
				t.Fatal(err)
			}
			p.Mode = mode
			if err := gb.SetL2Branch(p); err != nil {
				t.Fatal(err)
			}
		}
		for _, dir := range []string{"../../testdata/tiny-llama", "../../testdata/tiny-qwen2", "../../testdata/tiny-llama-fp8-channel"} {
			t.Run(dir[len("../../testdata/"):], func(t *testing.T) {
				m := load(t, dir, d.Dev)
				L := len(m.Layers)
				prompt := []int32{5, 17, 42, 3, 9}
				for i := range prompt {
					prompt[i] %= int32(m.Cfg.VocabSize)
				}
				gen := func(eager bool) []int32 {
					out, err := m.Generate(gb, prompt, decoder.GenerateOptions{MaxNewTokens: 16, IgnoreEOS: true, Eager: eager})
					if err != nil {
						t.Fatal(err)
					}
					return out
				}
				steps := func() [][]float32 {
					cache, err := m.NewKVCache(gb, 32)
					if err != nil {
						t.Fatal(err)
					}
					defer cache.Free()
					out, err := testmodel.Steps(m, gb, cache, prompt, 6, func(s int, _ []float32) int32 { return int32(11 + s) })
					if err != nil {
						t.Fatal(err)
					}
					return out
				}
				set("0", kernels.L2BranchBulk)
				wantEager, wantGraph := gen(true), gen(false)
				offSteps, offGraph := steps(), graphStepLogits(t, m, gb, prompt, 16)
				for _, c := range []struct {
					kinds    string
					mode     int
					perLayer int
				}{{"all", kernels.L2BranchBulk, 3}, {"all", kernels.L2BranchLast, 3}, {"o", kernels.L2BranchLine, 1}} {
					set(c.kinds, c.mode)
					name := c.kinds + "/mode" + string(rune('0'+c.mode))
					if got := gen(true); !slices.Equal(got, wantEager) {
						t.Errorf("%s, eager: tokens %v, want %v (off)", name, got, wantEager)
					}
					if got := gen(false); !slices.Equal(got, wantGraph) {
						t.Errorf("%s, graph: tokens %v, want %v (off)", name, got, wantGraph)
					}
					f0 := gb.L2BranchForks()
					on := steps()
					if n := gb.L2BranchForks() - f0; n != c.perLayer*L*6 {
						t.Errorf("%s: %d prefetches forked in 6 eager steps of %d layers, want %d", name, n, L, c.perLayer*L*6)
					}
					sameAs(t, name+", eager", on, offSteps)
					f0 = gb.L2BranchForks()
					gon := graphStepLogits(t, m, gb, prompt, 16)
					if n := gb.L2BranchForks() - f0; n != c.perLayer*L {
						t.Errorf("%s: %d prefetches forked in the capture, want %d", name, n, c.perLayer*L)
					}
					sameAs(t, name+", graph", gon, offGraph)
				}
			})
		}
	})
}

// sameAs fails t unless got has off's forwards, each bit for bit the same
// (what names the plan).
func sameAs(t *testing.T, what string, got, off [][]float32) {
	t.Helper()
	if len(got) != len(off) || len(off) == 0 {
		t.Errorf("%s: %d forwards of logits, want %d (plan off)", what, len(got), len(off))
		return
	}
	for i := range off {
		if len(off[i]) == 0 || !slices.Equal(got[i], off[i]) {
			t.Errorf("%s forward %d: logits differ from the plan off (max |diff| %g)", what, i, devtest.MaxAbsDiff(got[i], off[i]))
		}
	}
}
