//go:build cuda

package all_test

import (
	"path/filepath"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/models/decoder"
)

// ropeAttnLogits runs prompt into a fresh KV cache of capacity positions,
// then steps one-token forwards on the fixed tokens 20, 21, …, eager or
// replaying the captured decode step, and returns the logits of every
// forward (the prefill's first) and how many fused RoPE-attention launches
// the backend enqueued or recorded meanwhile.
func ropeAttnLogits(t *testing.T, m *decoder.Model, gb *cudabackend.Backend, prompt []int32, capacity, steps int, graph bool) ([][]float32, int64) {
	t.Helper()
	n0 := gb.RoPEAttentions()
	cache, err := m.NewKVCache(gb, capacity)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Free()
	if !graph {
		out, err := testmodel.Steps(m, gb, cache, prompt, steps, func(s int, _ []float32) int32 { return int32(20 + s) })
		if err != nil {
			t.Fatal(err)
		}
		return out, gb.RoPEAttentions() - n0
	}
	lt, err := m.Forward(gb, cache, prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	v, err := testmodel.ReadLogits(gb, lt)
	if err != nil {
		t.Fatal(err)
	}
	out := [][]float32{v}
	g, err := m.CaptureDecode(gb, cache)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for s := range steps {
		if lt, err = g.Step(int32(20 + s)); err != nil {
			t.Fatal(err)
		}
		if v, err = testmodel.ReadLogits(gb, lt); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out, gb.RoPEAttentions() - n0
}

// TestRoPEAttentionDecodeGPU: with FT_ROPE_ATTN (Backend.RoPEAttn: RoPE of
// q and of the new key and the KV store inside the decode attention
// kernel, no rope_store_bf16 launch) on Llama, Qwen2 (q/k/v biases),
// Qwen3 (q/k norms), Mistral (sliding window 8) and per-channel FP8 Llama
// at Llama-3-8B's head shape (head width 128, 4 query heads a KV head:
// wideFixture), the logits of a prefill and 8 one-token steps, eager and
// replaying the captured decode graph, are bit for bit those with it off;
// after a 5-token prompt (one split) and a 200-token one (2 splits by
// default, 7 of 8 with 16-position chunks: the new position in a split
// other than the last), every layer of every eager step ran the fused
// kernel and the capture recorded it once a layer; and 16 greedy tokens,
// eager and graph-replayed, are those with it off. On the tiny Llama
// fixture (head width 32) the op declines and the tokens stay the same.
// About 10-20 s (five random checkpoints written and loaded).
func TestRoPEAttentionDecodeGPU(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		gb, ok := d.Backend.(*cudabackend.Backend)
		if !ok {
			t.Skipf("the fused RoPE attention is the CUDA backend's; %s has none", d.Name)
		}
		saved, savedChunk := gb.RoPEAttn, gb.DecodePipeChunk
		defer func() { gb.RoPEAttn, gb.DecodePipeChunk = saved, savedChunk }()
		long := make([]int32, 200)
		for i := range long {
			long[i] = int32(3 + (i*37)%200)
		}
		for _, dir := range []string{"../../testdata/tiny-llama", "../../testdata/tiny-qwen2", "../../testdata/tiny-qwen3",
			"../../testdata/tiny-mistral", "../../testdata/tiny-llama-fp8-channel"} {
			t.Run(filepath.Base(dir), func(t *testing.T) {
				m := load(t, wideFixture(t, dir), d.Dev)
				L := int64(len(m.Layers))
				const steps = 8
				for _, c := range []struct {
					name   string
					prompt []int32
					chunk  int
				}{{"short", []int32{5, 17, 42, 3, 9}, 0}, {"long", long, 0}, {"long/chunk16", long, 16}} {
					gb.DecodePipeChunk = c.chunk
					for _, graph := range []bool{false, true} {
						what := c.name + ", eager"
						if graph {
							what = c.name + ", graph"
						}
						gb.RoPEAttn = false
						off, n := ropeAttnLogits(t, m, gb, c.prompt, 512, steps, graph)
						if n != 0 {
							t.Errorf("%s, off: %d fused launches", what, n)
						}
						gb.RoPEAttn = true
						on, n := ropeAttnLogits(t, m, gb, c.prompt, 512, steps, graph)
						want := L * steps
						if graph {
							want = L
						}
						if n != want {
							t.Errorf("%s, on: %d fused launches, want %d", what, n, want)
						}
						sameLogits(t, what+", FT_ROPE_ATTN on against off", on, off)
					}
				}
				gb.DecodePipeChunk = savedChunk
				ab := decodeAB{t: t, m: m, be: gb, prompt: long[:40], set: func(on bool) { gb.RoPEAttn = on }}
				ab.sameTokens("FT_ROPE_ATTN", 16)
			})
		}
		t.Run("tiny-llama/declines", func(t *testing.T) {
			m := load(t, "../../testdata/tiny-llama", d.Dev)
			n0 := gb.RoPEAttentions()
			ab := decodeAB{t: t, m: m, be: gb, prompt: []int32{5, 17, 42, 3, 9}, set: func(on bool) { gb.RoPEAttn = on }}
			ab.sameTokens("FT_ROPE_ATTN (head width 32)", 12)
			if n := gb.RoPEAttentions() - n0; n != 0 {
				t.Errorf("head width 32: %d fused launches, want none (the op declines)", n)
			}
		})
	})
}

var _ kernels.RoPEAttender = (*cudabackend.Backend)(nil)
