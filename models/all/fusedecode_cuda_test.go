//go:build cuda

package all_test

import (
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
)

// decodeSwitches turns the CUDA backend's decode fusions all on or all
// off: RMSNorm folded into the GEMVs (FT_FUSE_NORM, off by default); it
// returns a function restoring them as they were before the call.
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
		defer decodeSwitches(gb, false)() // restores the switches as they were
		for _, dir := range []string{"../../testdata/tiny-llama", "../../testdata/tiny-qwen2", "../../testdata/tiny-qwen3", "../../testdata/tiny-mistral"} {
			t.Run(dir[len("../../testdata/"):], func(t *testing.T) {
				m := load(t, dir, d.Dev)
				ab := decodeAB{t: t, m: m, be: d.Backend, prompt: []int32{5, 17, 42, 3, 9}, set: func(on bool) { decodeSwitches(gb, on) }}
				ab.sameTokens("fusions", 20)
				sameLogits(t, "eager, fusions on against all off", ab.eagerLogits(true, 6), ab.eagerLogits(false, 6))
			})
		}
	})
}
