//go:build cuda

package cudabackend

import (
	"fmt"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestPrefillWG4Quick is the first, seconds-long check of the producer /
// consumer variant wg4 (kernels/cuda/sm90a/extra/prefill_wg4.cu): it loads
// wg4's own sm_90a module (logging its kernels' occupancy: 384 threads and
// WG4_SMEM bytes, one block per SM), then runs against the CPU reference
// two contiguous prefills and one packed varlen batch chosen to exercise
// the mbarrier ring: T = 600 at position 37 (head width 128, GQA 2: five
// key tiles, so the three-stage ring wraps and the producer waits on empty
// barriers; the last query tile partial, its second consumer without
// rows), T = 1100 with a window of 200 (head width 64: blocks whose first
// key tile is past 0, consumers that see none of some tiles but must still
// release them), and a batch of a one-token sequence, one of 65 rows, one
// with a cached prefix and one of 530 rows over a shuffled paged pool.
// It also logs how many outputs differ from wg3's, which computes the same
// sums in the same order. Off compute capability 9.0 wg4 falls back to fa2
// and the comparisons still hold. Every mbarrier wait of the kernel traps
// after seconds, so a protocol bug fails the launch; run it under
// `timeout 30` anyway.
func TestPrefillWG4Quick(t *testing.T) {
	needGPU(t)
	wg4, err := choosePrefillVariant("wg4", 128, false, true)
	if err != nil || wg4.name != "wg4" || wg4.threads != 384 {
		t.Fatalf("wg4: %v (%s, %d threads)", err, wg4.name, wg4.threads)
	}
	if gb.dev.ComputeCapability() == 90 {
		testPrefillWGModule(t, wg4)
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
		{1100, 0, 1100, 4, 64, 200},
	} {
		t.Run(fmt.Sprintf("contiguous T%d at %d d%d window %d", c.T, c.pos0, c.d, c.window), func(t *testing.T) {
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
			got := run(t, "wg4", f, c.T, c.d)
			compare(t, "wg4 Attention", got, ref.F32(), 1e-2, 2e-2)
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
		got := run(t, "wg4", f, T, d)
		compare(t, "wg4 VarlenPrefillAttention", got, ref.F32(), 1e-2, 2e-2)
		t.Logf("%d of %d outputs differ from wg3's", differ(got, run(t, "wg3", f, T, d)), len(got))
	})
}
