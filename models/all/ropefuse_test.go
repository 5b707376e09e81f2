package all_test

import (
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
)

// qkvRoPECounter is the CPU backend with its kernels.QKVRoPEStorer
// counted; decline makes it decline every call (the separate ops run).
type qkvRoPECounter struct {
	*kernels.CPUBackend
	calls   int
	decline bool
}

func (c *qkvRoPECounter) ProjectRoPEStoreKV(a kernels.QKVRoPE) (bool, error) {
	if c.decline {
		return false, nil
	}
	c.calls++
	return c.CPUBackend.ProjectRoPEStoreKV(a)
}

// TestFusedQKVRoPEFamilies: on the CPU, the one-token steps of Llama,
// Qwen2 (q/k/v biases) and Mistral (sliding window) run every layer's
// q/k/v, RoPE and KV store as one kernels.QKVRoPEStorer op, with the
// logits of the separate ops bit for bit; Qwen3 (q/k norms between the
// projection and the rotation) never does.
func TestFusedQKVRoPEFamilies(t *testing.T) {
	for _, c := range []struct {
		dir         string
		fuses, bias bool
	}{{"../../testdata/tiny-llama", true, false}, {"../../testdata/tiny-qwen2", true, true}, {"../../testdata/tiny-mistral", true, false}, {"../../testdata/tiny-qwen3", false, false}} {
		t.Run(c.dir[len("../../testdata/"):], func(t *testing.T) {
			dev, b := cpu(t)
			m := load(t, c.dir, dev)
			if got := m.Layers[0].Attn.Q.Bias != nil; got != c.bias {
				t.Fatalf("fixture: q_proj has a bias %v, want %v", got, c.bias)
			}
			prompt := []int32{5, 17, 42, 3, 9}
			const n = 6
			run := func(be *qkvRoPECounter) [][]float32 {
				cache, err := m.NewKVCache(be, 32)
				if err != nil {
					t.Fatal(err)
				}
				defer cache.Free()
				out, err := testmodel.Steps(m, be, cache, prompt, n, func(s int, _ []float32) int32 { return int32(11 + s) })
				if err != nil {
					t.Fatal(err)
				}
				return out
			}
			off := run(&qkvRoPECounter{CPUBackend: b.(*kernels.CPUBackend), decline: true})
			f := &qkvRoPECounter{CPUBackend: b.(*kernels.CPUBackend)}
			on := run(f)
			for i := range off {
				if !slices.Equal(on[i], off[i]) {
					t.Errorf("forward %d: logits with the fused op differ from the separate ops", i)
				}
			}
			want := 0
			if c.fuses {
				want = n * len(m.Layers)
			}
			if f.calls != want {
				t.Errorf("%d fused calls, want %d", f.calls, want)
			}
		})
	}
}
