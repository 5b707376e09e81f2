//go:build cuda

package all_test

import (
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
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
				ab := decodeAB{t: t, m: m, be: d.Backend, prompt: []int32{5, 17, 42, 3, 9}, set: func(on bool) { gb.GEMVPersistQKV = on }}
				pipe, mixed := ab.eagerLogits(false, 6), ab.eagerLogits(true, 6)
				sameLogits(t, "eager, mixed against the pipelined GEMVs", mixed, pipe)
				ab.graphTokensEager("mixed", true, 16)
			})
		}
	})
}
