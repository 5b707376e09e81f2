//go:build cuda

package all_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/models/llama"
	"github.com/flextensor-go/flextensor/runtime"
)

// packedCounter is the CUDA backend counting the PackedPrefillAttention
// calls that ran (FT_VARLEN_CONTIG): every other op is the backend's own.
type packedCounter struct {
	*cudabackend.Backend
	ran int
}

func (c *packedCounter) PackedPrefillAttention(out, q, k, v *runtime.Tensor, qStarts []int32, window int) (bool, error) {
	ran, err := c.Backend.PackedPrefillAttention(out, q, k, v, qStarts, window)
	if ran {
		c.ran++
	}
	return ran, err
}

var _ kernels.PackedPrefillAttender = (*packedCounter)(nil)

// contigModel writes a two-layer Llama of random weights with 4 query and
// 2 KV heads of width d (the packed kernels' widths, which the fixtures'
// 32 is not) and loads it on dev.
func contigModel(t *testing.T, d int, dev runtime.Device) *decoder.Model {
	t.Helper()
	dir := t.TempDir()
	cfg := llama.Config{Config: decoder.Config{HiddenSize: 4 * d, IntermediateSize: 8 * d, NumHiddenLayers: 2, NumAttentionHeads: 4,
		NumKeyValueHeads: 2, HeadDim: d, VocabSize: 256, MaxPositionEmbeddings: 2048, RMSNormEps: 1e-5,
		Rope: decoder.Rope{Theta: 10000, Type: "default"}, BOSTokenID: 0, EOSTokenIDs: []int{1}}}
	if err := llama.MakeCheckpoint(dir, cfg, 11, 1<<30); err != nil {
		t.Fatal(err)
	}
	return load(t, dir, dev)
}

// contigPlans are prompts of lengths around the 128-row tile (1, 2, 127,
// 128, 129, 300, 513) joining at three steps, beside decode steps.
func contigPlans(vocab int) []seqPlan {
	prompt := func(n, seed int) []int32 { return planPrompt(n, seed, vocab) }
	return []seqPlan{
		{prompt(300, 1), 3, 0},
		{prompt(129, 2), 2, 0},
		{prompt(1, 3), 4, 0},
		{prompt(128, 4), 0, 0},
		{prompt(2, 5), 2, 0},
		{prompt(127, 6), 2, 1},
		{prompt(513, 7), 1, 2},
	}
}

// TestVarlenContigBatchGPU: batched runs (sequences of mixed lengths
// joining and finishing at different steps, decode steps beside fresh
// prompts) give bit for bit the same logits, hence the same greedy tokens,
// with the packed prefill attention (FT_VARLEN_CONTIG) on as off: on the
// four fixtures (head width 32: the packed path declines, the forward must
// fall back) and on two-layer random Llamas of head widths 64 and 128,
// where on compute capability 9.0 it must run once a layer in each forward
// with a fresh multi-token prompt, but the last layer (the returned rows
// attend alone); the KV blocks all come back.
func TestVarlenContigBatchGPU(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		gb, ok := d.Backend.(*cudabackend.Backend)
		if !ok {
			t.Skipf("the packed prefill attention is the CUDA backend's; %s has none", d.Name)
		}
		saved := gb.VarlenContig
		defer func() { gb.VarlenContig = saved }()
		be := &packedCounter{Backend: gb}
		type modelCase struct {
			name   string
			make   func(t *testing.T) *decoder.Model
			plans  func(vocab int) []seqPlan
			expect int // forwards with fresh multi-token prompts where the path must run (cc 9.0); 0: must not run
		}
		var cases []modelCase
		for _, fx := range batchFixtures {
			cases = append(cases, modelCase{fx.family, func(t *testing.T) *decoder.Model { return load(t, fx.dir, d.Dev) }, plans, 0})
		}
		for _, w := range []int{64, 128} {
			cases = append(cases, modelCase{fmt.Sprintf("llama d%d", w), func(t *testing.T) *decoder.Model { return contigModel(t, w, d.Dev) }, contigPlans, 3})
		}
		for _, mc := range cases {
			t.Run(mc.name, func(t *testing.T) {
				m := mc.make(t)
				ps := mc.plans(m.Cfg.VocabSize)
				run := func(on bool) [][][]float32 {
					gb.VarlenContig = on
					cache, err := m.NewPagedCache(d.Backend, 256, 16)
					if err != nil {
						t.Fatal(err)
					}
					defer cache.Close()
					out := runBatched(t, m, be, cache, ps)
					if cache.FreeBlocks() != cache.TotalBlocks() {
						t.Errorf("%d of %d blocks free after the run", cache.FreeBlocks(), cache.TotalBlocks())
					}
					return out
				}
				be.ran = 0
				off := run(false)
				if be.ran != 0 {
					t.Fatalf("switch off: the packed path ran %d times", be.ran)
				}
				on := run(true)
				want := 0
				cc, _ := gb.Device().(interface{ ComputeCapability() int })
				if mc.expect > 0 && cc != nil && cc.ComputeCapability() == 90 {
					want = mc.expect * (len(m.Layers) - 1) // not in the last layers, whose returned rows attend alone (decoder's lastrows.go)
				}
				if be.ran != want {
					t.Errorf("switch on: the packed path ran %d times, want %d", be.ran, want)
				}
				for i := range off {
					if len(on[i]) != len(off[i]) {
						t.Fatalf("sequence %d: %d forwards on, %d off", i, len(on[i]), len(off[i]))
					}
					for s := range off[i] {
						if !slices.Equal(on[i][s], off[i][s]) {
							t.Errorf("sequence %d forward %d: logits differ with the packed path on (greedy %d on, %d off)",
								i, s, kernels.Argmax(on[i][s]), kernels.Argmax(off[i][s]))
						}
					}
				}
			})
		}
	})
}
