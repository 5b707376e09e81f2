//go:build cuda

package generate_test

import (
	"context"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/models/generate"
)

// swapBatchPrompts are bench/s13b-batch.jsonl's prompts: 8 requests of 6 to
// 13 token ids.
var swapBatchPrompts = [][]int32{
	{2, 15, 28, 41, 54, 67},
	{9, 22, 35, 48, 61, 74, 87},
	{16, 29, 42, 55, 68, 81, 94, 107},
	{23, 36, 49, 62, 75, 88, 101, 114, 127},
	{30, 43, 56, 69, 82, 95, 108, 121, 134, 147},
	{37, 50, 63, 76, 89, 102, 115, 128, 141, 154, 167},
	{44, 57, 70, 83, 96, 109, 122, 135, 148, 161, 174, 187},
	{51, 64, 77, 90, 103, 116, 129, 142, 155, 168, 181, 194, 207},
}

// swapBatchEqualsAlone runs swapBatchPrompts greedy, maxNew tokens each
// past EOS, through a scheduler with a swap area over a cache of 25 blocks
// of 16 positions on b (the s13b batch's preempting cache), and checks
// that every preemption was a swap (the prompts prefill in one step, so
// every victim decodes), that there were some, that every request gives
// the tokens it gives alone (decoder.Model.Generate), and that every block
// and swapped block is back at the end, and the swap area's host memory
// after the cache's Close.
func swapBatchEqualsAlone(t *testing.T, m *decoder.Model, b kernels.Backend, maxNew int) {
	t.Helper()
	host := b.Device().HostMemory().InUse
	s, cache := newScheduler(t, m, b, 25, 16, generate.Options{SwapBytes: 64 << 20})
	var hs []*generate.Handle
	for _, p := range swapBatchPrompts {
		hs = append(hs, must(s.Submit(generate.Request{Prompt: p, MaxNewTokens: maxNew, IgnoreEOS: true})))
	}
	if err := s.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s.Swaps() == 0 || s.Swaps() != s.Preemptions() {
		t.Errorf("%d preemptions, %d swaps; want some, all swapped", s.Preemptions(), s.Swaps())
	}
	for i, h := range hs {
		res := h.Wait()
		want, err := m.Generate(b, swapBatchPrompts[i], decoder.GenerateOptions{MaxNewTokens: maxNew, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Generated, want) {
			at := 0
			for at < len(want) && at < len(res.Generated) && res.Generated[at] == want[at] {
				at++
			}
			t.Errorf("request %d: batched with swaps differs from alone from token %d on: %v, alone %v", i, at, res.Generated, want)
		}
	}
	if s.SwapUsedBlocks() != 0 || cache.FreeBlocks() != cache.TotalBlocks() || cache.LiveSeqs() != 0 {
		t.Errorf("at the end: %d swapped blocks, %d of %d blocks free, %d sequences live", s.SwapUsedBlocks(), cache.FreeBlocks(), cache.TotalBlocks(), cache.LiveSeqs())
	}
	cache.Close()
	if n := b.Device().HostMemory().InUse; n != host {
		t.Errorf("host memory in use %d bytes after the cache's Close, %d before the scheduler", n, host)
	}
	t.Logf("%d preemptions, all swapped", s.Preemptions())
}

// TestSchedulerSwapBatchCUDA: the s13b batch (8 greedy requests of 100
// tokens past EOS, a KV cache of 25 blocks of 16 positions: preempting),
// with preempted requests swapped out to pinned host memory and back, gives
// every request on tiny-llama and tiny-qwen3 exactly the tokens it gives
// alone on the GPU: with recompute, s13b's tiny-llama request 5 parted from
// its lone run at a near-tie, its re-prefilled bf16 keys and values
// rounded otherwise than the decoded ones. The CPU subtest runs it too (a
// check of the test itself).
func TestSchedulerSwapBatchCUDA(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		for _, fx := range []struct{ name, dir string }{
			{"tiny-llama", "../../testdata/tiny-llama"},
			{"tiny-qwen3", "../../testdata/tiny-qwen3"},
		} {
			t.Run(fx.name, func(t *testing.T) {
				m, ck, err := models.Load(fx.dir, d.Dev)
				if err != nil {
					t.Fatal(err)
				}
				defer ck.Close()
				defer m.Close()
				swapBatchEqualsAlone(t, m, d.Backend, 100)
			})
		}
	})
}
