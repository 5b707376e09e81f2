//go:build cuda

package cudabackend

import (
	"fmt"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// bulkVariantNames are the FT_DECODE_VARIANT values of the bulk-copy
// variants (decode_tr.cu's BULK).
func bulkVariantNames() []string {
	var names []string
	for _, v := range pipeVariants {
		if v.Bulk {
			names = append(names, v.Name())
		}
	}
	return names
}

// TestDecodeBulkVariant: the bulk-copy variants of the transposed decode
// attention (FT_DECODE_VARIANT s6w2h1b, s3w4h1b) over a contiguous cache
// whose rows past the position are NaN, at contexts 1, 17, 512, 8,192 and
// 32,006, 1, 2, 4 and 8 query heads per KV head, head widths 128 and 64 (64
// takes its default kernel), with and without a window: each against the
// CPU reference and the default variant (both within 1e-2 + 2e-2·|ref|),
// and bit for bit equal over three runs (the split merge's order is fixed).
// Then each in a captured graph whose position comes from the step buffer,
// replayed at those contexts, against the reference and bit for bit
// against a second replay.
func TestDecodeBulkVariant(t *testing.T) {
	needGPU(t)
	bulk := bulkVariantNames()
	if len(bulk) == 0 {
		t.Fatal("no bulk-copy decode variant is compiled")
	}
	if gdev.ComputeCapability() < 90 {
		t.Skipf("compute capability %d: the bulk variants need 9.0", gdev.ComputeCapability())
	}
	rng := newRNG(t)
	for _, c := range []struct {
		n, C, H, K, d, window int
	}{
		{1, 64, 32, 8, 128, 0},
		{17, 4096, 32, 8, 128, 0},
		{17, 4096, 8, 8, 128, 0},
		{512, 8704, 32, 8, 128, 0},
		{512, 8704, 16, 8, 128, 0},
		{512, 8704, 64, 8, 128, 100},
		{8192, 8704, 32, 8, 128, 0},
		{8192, 8704, 16, 2, 64, 0},
		{8192, 32768, 64, 8, 128, 0},
		{32006, 32768, 32, 8, 128, 0},
		{32006, 32768, 8, 8, 128, 4096},
		{32006, 32768, 16, 2, 128, 0},
	} {
		pos := c.n - 1
		gkc, gvc, kc, vc, q := contigDecode(t, rng, c.n, c.C, c.H, c.K, c.d)
		ref := contigRef(t, q, kc, vc, pos, c.C, c.H, c.K, c.d, c.window)
		gq := gpu(t, runtime.BF16, q, 1, c.H, c.d)
		run := func(t *testing.T, variant string) []float32 {
			t.Helper()
			defer decodeMode{variant: variant}.set()()
			var first []float32
			for rep := range 3 {
				out := poisoned(t, runtime.BF16, 1, c.H, c.d)
				if err := gb.AttentionWindow(out, gq, gkc, gvc, pos, c.window); err != nil {
					t.Fatal(err)
				}
				got := read(t, out)
				if rep == 0 {
					first = got
					continue
				}
				if i := sameBits(got, first); i >= 0 {
					t.Fatalf("variant %q run %d differs from run 0 at %d: %v, %v", variant, rep, i, got[i], first[i])
				}
			}
			return first
		}
		name := fmt.Sprintf("context %d cap %d H%d K%d d%d window %d", c.n, c.C, c.H, c.K, c.d, c.window)
		t.Run(name, func(t *testing.T) {
			def := run(t, "")
			compare(t, "default variant", def, ref, 1e-2, 2e-2)
			for _, v := range bulk {
				got := run(t, v)
				compare(t, v+" against the reference", got, ref, 1e-2, 2e-2)
				compare(t, v+" against the default variant", got, def, 1e-2, 2e-2)
			}
		})
	}

	// Captured: one graph per variant over a full cache of 32,768 rows,
	// the position read from the step buffer at replay.
	const C, H, K, d = 32768, 32, 8, 128
	gkc, gvc, kc, vc, q := contigDecode(t, rng, C, C, H, K, d)
	gq := gpu(t, runtime.BF16, q, 1, H, d)
	contexts := []int{1, 17, 512, 8192, 32006}
	refs := make([][]float32, len(contexts))
	for i, n := range contexts {
		refs[i] = contigRef(t, q, kc, vc, n-1, C, H, K, d, 0)
	}
	for _, v := range bulk {
		t.Run("captured "+v, func(t *testing.T) {
			defer decodeMode{variant: v}.set()()
			out := poisoned(t, runtime.BF16, 1, H, d)
			graph, err := gb.CaptureStep(func() error { return gb.Attention(out, gq, gkc, gvc, 5) })
			if err != nil {
				t.Fatal(err)
			}
			defer graph.Close()
			replay := func(pos int) []float32 {
				t.Helper()
				if err := gb.SetStep([]int32{0}, pos); err != nil {
					t.Fatal(err)
				}
				if err := graph.Replay(); err != nil {
					t.Fatal(err)
				}
				return read(t, out)
			}
			for i, n := range contexts {
				got := replay(n - 1)
				compare(t, fmt.Sprintf("replay at context %d", n), got, refs[i], 1e-2, 2e-2)
				if j := sameBits(replay(n-1), got); j >= 0 {
					t.Fatalf("second replay at context %d differs at %d", n, j)
				}
			}
		})
	}
}
