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

// TestGEMVMixedDecodeGPU: on the Llama and Qwen2 fixtures, FT_GEMV=mixed
// (GEMVPersistQKV: q/k/v on gemv.cu's gemv3_bf16, the other one-token
// GEMVs pipelined) gives bit for bit the logits of the pipelined GEMVs
// everywhere (FT_GEMV=pipe) over 6 eager one-token steps, and 16 greedy
// tokens replaying the captured decode graph equal the eager ones.
func TestGEMVMixedDecodeGPU(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		gb, ok := d.Backend.(*cudabackend.Backend)
		if !ok {
			t.Skipf("the GEMV modes are the CUDA backend's; %s has none", d.Name)
		}
		defer func(pipe string, bal int, qkv bool) { gb.GEMVPipe, gb.GEMVBal, gb.GEMVPersistQKV = pipe, bal, qkv }(gb.GEMVPipe, gb.GEMVBal, gb.GEMVPersistQKV)
		gb.GEMVPipe, gb.GEMVBal = "pipe", 0
		for _, dir := range []string{"../../testdata/tiny-llama", "../../testdata/tiny-qwen2"} {
			t.Run(dir[len("../../testdata/"):], func(t *testing.T) {
				m := load(t, dir, d.Dev)
				prompt := []int32{5, 17, 42, 3, 9}
				steps := func(mixed bool) [][]float32 {
					gb.GEMVPersistQKV = mixed
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
				pipe, mixed := steps(false), steps(true)
				for i := range pipe {
					if !slices.Equal(mixed[i], pipe[i]) {
						t.Errorf("forward %d: logits under mixed differ from the pipelined GEMVs' (max |diff| %g)", i, devtest.MaxAbsDiff(mixed[i], pipe[i]))
					}
				}
				gb.GEMVPersistQKV = true
				gen := func(eager bool) []int32 {
					out, err := m.Generate(d.Backend, prompt, decoder.GenerateOptions{MaxNewTokens: 16, IgnoreEOS: true, Eager: eager})
					if err != nil {
						t.Fatal(err)
					}
					return out
				}
				if eager, graph := gen(true), gen(false); !slices.Equal(graph, eager) {
					t.Errorf("mixed, graph replay: tokens %v, eager %v", graph, eager)
				}
			})
		}
	})
}
