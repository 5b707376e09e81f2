//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestPrefillWG6Quick is the first, seconds-long check of the ping-pong
// variant wg6 (kernels/cuda/sm90a/prefill_wg6.cu): it loads the sm_90a
// module (logging its kernels' occupancy), then runs one small contiguous
// prefill (T = 300 at position 37, so three query tiles, the last one
// partial, and the two warpgroups of a block doing different numbers of
// tiles; GQA with two query heads a KV head) and one packed varlen batch (a
// one-token sequence, one of 65 rows whose second warpgroup has a single
// row, one with a cached prefix) against the CPU reference, without and
// with a sliding window of 100 positions. Its outputs must be wg's within
// a bf16 unit: wg computes the same sums in the same order, but multiplies
// by ex2.approx(0) where wg6 skips the rescale (bf16Far). Off compute
// capability 9.0 both fall back to fa2 and the comparison still holds.
func TestPrefillWG6Quick(t *testing.T) {
	testPrefillWGQuick(t, "wg6", "wg", true, 0)
	testPrefillWGQuick(t, "wg6", "wg", true, 100)
}

// testPrefillWGQuick runs TestPrefillWG6Quick's cases on variant name with
// window win, comparing with twin: reporting the outputs that differ and,
// exact, failing on any further than a bf16 unit from twin's (on compute
// capability 9.0; elsewhere both fall back to fa2).
func testPrefillWGQuick(t *testing.T, name, twin string, exact bool, win int) {
	needGPU(t)
	v, err := choosePrefillVariant(name, 128, false, true)
	if err != nil || v.name != name {
		t.Fatalf("%s: %v (%s)", name, err, v.name)
	}
	if gb.dev.ComputeCapability() == 90 {
		testPrefillWGModule(t, v)
	}
	rng := newRNG(t)
	const H, K, d = 4, 2, 128
	run := func(t *testing.T, mode string, f func(out *runtime.Tensor) error, T int) []float32 {
		out := poisoned(t, runtime.BF16, T, H, d)
		var err error
		withPrefill(mode, func() { err = f(out) })
		if err != nil {
			t.Fatal(err)
		}
		return read(t, out)
	}
	check := func(t *testing.T, got, other []float32) {
		n, far := countDiffer(got, other), bf16Far(got, other)
		if exact && far > 0 && gb.dev.ComputeCapability() == 90 {
			t.Errorf("%d of %d outputs further than a bf16 unit from %s's (same sums, same order)", far, len(got), twin)
		}
		t.Logf("%d of %d outputs differ from %s's", n, len(got), twin)
	}
	t.Run(fmt.Sprintf("contiguous T300 at 37 window %d", win), func(t *testing.T) {
		const T, pos0, C = 300, 37, 340
		n := pos0 + T
		q := randBF16(rng, T*H*d, 2)
		kv := randBF16(rng, 2*C*K*d, 2)
		kc, vc := kv[:C*K*d], kv[C*K*d:]
		gkc, gvc := poisoned(t, runtime.BF16, C, K, d), poisoned(t, runtime.BF16, C, K, d)
		gkcFill, err := gkc.Slice(0, n)
		if err != nil {
			t.Fatal(err)
		}
		gvcFill, _ := gvc.Slice(0, n)
		if err := gb.WriteBytes(gkcFill, bf16Bytes(kc[:n*K*d])); err != nil {
			t.Fatal(err)
		}
		if err := gb.WriteBytes(gvcFill, bf16Bytes(vc[:n*K*d])); err != nil {
			t.Fatal(err)
		}
		gq := gpu(t, runtime.BF16, q, T, H, d)
		ref := host(t, runtime.F32, nil, T, H, d)
		if err := cb.AttentionWindow(ref, host(t, runtime.F32, q, T, H, d), host(t, runtime.F32, kc, C, K, d),
			host(t, runtime.F32, vc, C, K, d), pos0, win); err != nil {
			t.Fatal(err)
		}
		f := func(out *runtime.Tensor) error { return gb.AttentionWindow(out, gq, gkc, gvc, pos0, win) }
		got := run(t, name, f, T)
		compare(t, name+" Attention", got, ref.F32(), 1e-2, 2e-2)
		check(t, got, run(t, twin, f, T))
	})
	t.Run(fmt.Sprintf("varlen window %d", win), func(t *testing.T) {
		seqs := []pagedSeq{{1, 1}, {65, 65}, {200, 290}}
		kv, qStarts, kp, vp, P := pagedLayout(rng, seqs, K, d, 16)
		T := int(qStarts[len(seqs)])
		q := randBF16(rng, T*H*d, 2)
		ref := host(t, runtime.F32, nil, T, H, d)
		if err := cb.VarlenPrefillAttention(ref, host(t, runtime.F32, q, T, H, d), host(t, runtime.F32, kp, P, K, d),
			host(t, runtime.F32, vp, P, K, d), qStarts, kv, win); err != nil {
			t.Fatal(err)
		}
		gq := gpu(t, runtime.BF16, q, T, H, d)
		gk, gv := gpu(t, runtime.BF16, kp, P, K, d), gpu(t, runtime.BF16, vp, P, K, d)
		f := func(out *runtime.Tensor) error { return gb.VarlenPrefillAttention(out, gq, gk, gv, qStarts, kv, win) }
		got := run(t, name, f, T)
		compare(t, name+" VarlenPrefillAttention", got, ref.F32(), 1e-2, 2e-2)
		check(t, got, run(t, twin, f, T))
	})
}

// bf16Far counts the elements of a and b (bf16 outputs read as float32)
// further apart than one unit in the last place of the larger: wg6 sums as
// wg does but skips wg's products by 2^(m−m) (ex2.approx of 0, which need
// not be exactly 1), so its bf16 outputs may differ from wg's by a
// rounding, rarely.
func bf16Far(a, b []float32) int {
	n := 0
	for i := range a {
		d, m := math.Abs(float64(a[i])-float64(b[i])), math.Max(math.Abs(float64(a[i])), math.Abs(float64(b[i])))
		if d > m/128 || math.IsNaN(d) {
			n++
		}
	}
	return n
}

// countDiffer counts the elements of a and b that are not equal.
func countDiffer(a, b []float32) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}
