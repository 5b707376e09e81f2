//go:build cuda

package cudabackend

import (
	"fmt"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestPrefillWG5Quick is the first, seconds-long check of the variant wg5
// (kernels/cuda/sm90a/extra/prefill_wg5.cu: wg3's ping-pong plus the
// intra-warpgroup overlap of the softmax with the previous tile's P·V,
// two key and four value stages): it loads wg5's own sm_90a module
// (logging its kernels' occupancy), then runs against the CPU reference
// contiguous prefills chosen to exercise the stage rings and the turn
// combinations: causal T = 600 at position 37 (head width 128, GQA 2: five
// key tiles, both rings wrap; the last query tile partial, its second
// warpgroup without rows), causal T = 333 at 0 (GQA 4, an odd length whose
// last tile has 77 rows), causal T = 1000 at 300 (ten tiles, several
// wraps of the value ring), a sliding window of 200 over T = 1100 (head
// width 64: blocks whose first key tile is past 0, warpgroups with P·V-only
// and empty turns), and a packed varlen batch of a one-token sequence, one
// of 65 rows, one with a cached prefix and one of 530 rows over a shuffled
// paged pool. It also logs how many outputs differ from wg3's, which adds
// the same products in a different order (O·a + P·V against (O + P·V)·a).
// Off compute capability 9.0 wg5 falls back to fa2 and the comparisons
// still hold. Run it under `timeout 30`.
func TestPrefillWG5Quick(t *testing.T) {
	needGPU(t)
	wg5, err := choosePrefillVariant("wg5", 128, false, true)
	if err != nil || wg5.name != "wg5" || wg5.extra != "prefill_wg5.cu" {
		t.Fatalf("wg5: %v (%s, extra %q)", err, wg5.name, wg5.extra)
	}
	if gb.dev.ComputeCapability() == 90 {
		testPrefillWGModule(t, wg5)
	}
	rng := newRNG(t)
	const H = 4
	run := func(t *testing.T, mode string, f func(out *runtime.Tensor) error, T, d int) []float32 {
		out := poisoned(t, runtime.BF16, T, H, d)
		var err error
		withPrefill(mode, func() { err = f(out) })
		if err != nil {
			t.Fatal(err)
		}
		return read(t, out)
	}
	differ := func(a, b []float32) int {
		n := 0
		for i := range a {
			if a[i] != b[i] {
				n++
			}
		}
		return n
	}
	for _, c := range []struct{ T, pos0, C, K, d, window int }{
		{600, 37, 640, 2, 128, 0},
		{333, 0, 333, 1, 128, 0},
		{1000, 300, 1300, 2, 128, 0},
		{1100, 0, 1100, 4, 64, 200},
	} {
		t.Run(fmt.Sprintf("contiguous T%d at %d K%d d%d window %d", c.T, c.pos0, c.K, c.d, c.window), func(t *testing.T) {
			n := c.pos0 + c.T
			q := randBF16(rng, c.T*H*c.d, 2)
			kv := randBF16(rng, 2*c.C*c.K*c.d, 2)
			kc, vc := kv[:c.C*c.K*c.d], kv[c.C*c.K*c.d:]
			gkc, gvc := poisoned(t, runtime.BF16, c.C, c.K, c.d), poisoned(t, runtime.BF16, c.C, c.K, c.d)
			gkcFill, err := gkc.Slice(0, n)
			if err != nil {
				t.Fatal(err)
			}
			gvcFill, _ := gvc.Slice(0, n)
			if err := gb.WriteBytes(gkcFill, bf16Bytes(kc[:n*c.K*c.d])); err != nil {
				t.Fatal(err)
			}
			if err := gb.WriteBytes(gvcFill, bf16Bytes(vc[:n*c.K*c.d])); err != nil {
				t.Fatal(err)
			}
			gq := gpu(t, runtime.BF16, q, c.T, H, c.d)
			ref := host(t, runtime.F32, nil, c.T, H, c.d)
			if err := cb.AttentionWindow(ref, host(t, runtime.F32, q, c.T, H, c.d), host(t, runtime.F32, kc, c.C, c.K, c.d),
				host(t, runtime.F32, vc, c.C, c.K, c.d), c.pos0, c.window); err != nil {
				t.Fatal(err)
			}
			f := func(out *runtime.Tensor) error { return gb.AttentionWindow(out, gq, gkc, gvc, c.pos0, c.window) }
			got := run(t, "wg5", f, c.T, c.d)
			compare(t, "wg5 Attention", got, ref.F32(), 1e-2, 2e-2)
			t.Logf("%d of %d outputs differ from wg3's", differ(got, run(t, "wg3", f, c.T, c.d)), len(got))
		})
	}
	t.Run("varlen", func(t *testing.T) {
		const K, d = 2, 128
		seqs := []pagedSeq{{1, 1}, {65, 65}, {200, 290}, {530, 530}}
		kv, qStarts, kp, vp, P := pagedLayout(rng, seqs, K, d, 16)
		T := int(qStarts[len(seqs)])
		q := randBF16(rng, T*H*d, 2)
		ref := host(t, runtime.F32, nil, T, H, d)
		if err := cb.VarlenPrefillAttention(ref, host(t, runtime.F32, q, T, H, d), host(t, runtime.F32, kp, P, K, d),
			host(t, runtime.F32, vp, P, K, d), qStarts, kv, 0); err != nil {
			t.Fatal(err)
		}
		gq := gpu(t, runtime.BF16, q, T, H, d)
		gk, gv := gpu(t, runtime.BF16, kp, P, K, d), gpu(t, runtime.BF16, vp, P, K, d)
		f := func(out *runtime.Tensor) error { return gb.VarlenPrefillAttention(out, gq, gk, gv, qStarts, kv, 0) }
		got := run(t, "wg5", f, T, d)
		compare(t, "wg5 VarlenPrefillAttention", got, ref.F32(), 1e-2, 2e-2)
		t.Logf("%d of %d outputs differ from wg3's", differ(got, run(t, "wg3", f, T, d)), len(got))
	})
}
