//go:build cuda

package all_test

import (
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/models/decoder"
)

// decodeSwitches turns the CUDA backend's decode fusions all on or all
// off: RMSNorm folded into the GEMVs (FT_FUSE_NORM, off by default); it
// returns a function restoring them.
func decodeSwitches(gb *cudabackend.Backend, on bool) (restore func()) {
	norm := gb.NoFusedNorm
	gb.NoFusedNorm = !on
	return func() { gb.NoFusedNorm = norm }
}

// TestFusedDecodeSwitchesGPU: on every family fixture, 20 greedy tokens
// after a prompt, eager and replaying the decode graph, are the same with
// every decode fusion on as with all off; and the logits of a prefill and
// eager one-token steps are bit for bit the same.
func TestFusedDecodeSwitchesGPU(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		gb, ok := d.Backend.(*cudabackend.Backend)
		if !ok {
			t.Skipf("the decode fusions are the CUDA backend's; %s has none", d.Name)
		}
		for _, dir := range []string{"../../testdata/tiny-llama", "../../testdata/tiny-qwen2", "../../testdata/tiny-qwen3", "../../testdata/tiny-mistral"} {
			t.Run(dir[len("../../testdata/"):], func(t *testing.T) {
				m := load(t, dir, d.Dev)
				prompt := []int32{5, 17, 42, 3, 9}
				gen := func(on, eager bool) []int32 {
					defer decodeSwitches(gb, on)()
					out, err := m.Generate(d.Backend, prompt, decoder.GenerateOptions{MaxNewTokens: 20, IgnoreEOS: true, Eager: eager})
					if err != nil {
						t.Fatal(err)
					}
					return out
				}
				want := gen(false, true)
				for _, c := range []struct{ on, eager bool }{{true, true}, {true, false}, {false, false}} {
					if got := gen(c.on, c.eager); !slices.Equal(got, want) {
						t.Errorf("fusions on %v, eager %v: tokens %v, want %v (all off, eager)", c.on, c.eager, got, want)
					}
				}
				steps := func(on bool) [][]float32 {
					defer decodeSwitches(gb, on)()
					cache, err := m.NewKVCache(d.Backend, 32)
					if err != nil {
						t.Fatal(err)
					}
					defer cache.Free()
					out, err := testmodel.Steps(m, d.Backend, cache, prompt, 6, func(s int, _ []float32) int32 { return int32(11 + s) })
					if err != nil {
						t.Fatal(err)
					}
					return out
				}
				on, off := steps(true), steps(false)
				for i := range off {
					if !slices.Equal(on[i], off[i]) {
						t.Errorf("forward %d: logits with the fusions on differ from all off (max |diff| %g)", i, devtest.MaxAbsDiff(on[i], off[i]))
					}
				}
			})
		}
	})
}
