//go:build cuda

package cudabackend

import (
	"fmt"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestDecodeMMA: one-token decode attention over a contiguous cache through
// the tensor-core kernel (one launch, splits merged by the last block) and
// through the legacy kernels, against the CPU reference; at positions that
// give one split and many, head widths 64 and 128, 1 to 8 query heads per
// KV head, with a sliding window. Each case runs three times so that a
// counter left non-zero by the last-block merge would show.
func TestDecodeMMA(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct {
		pos0, C, H, K, d, window int
	}{
		{0, 16, 32, 8, 128, 0},
		{533, 8704, 32, 8, 128, 0},
		{8191, 8704, 32, 8, 128, 0},
		{100, 128, 32, 8, 128, 0}, // capacity 128: at most two splits
		{2000, 2048, 8, 1, 64, 0},
		{77, 300, 8, 8, 64, 0},
		{1999, 2048, 16, 2, 128, 100},
		{5000, 6000, 28, 4, 128, 0},
	} {
		for _, legacy := range []bool{false, true} {
			t.Run(fmt.Sprintf("pos %d cap %d H%d K%d d%d window %d legacy %v", c.pos0, c.C, c.H, c.K, c.d, c.window, legacy), func(t *testing.T) {
				n := c.pos0 + 1
				q := randBF16(rng, c.H*c.d, 2)
				row := c.K * c.d
				kc, vc := randBF16(rng, n*row, 2), randBF16(rng, n*row, 2)
				gkc, gvc := poisoned(t, runtime.BF16, c.C, c.K, c.d), poisoned(t, runtime.BF16, c.C, c.K, c.d)
				fk, _ := gkc.Slice(0, n)
				fv, _ := gvc.Slice(0, n)
				if err := gb.WriteBytes(fk, bf16Bytes(kc)); err != nil {
					t.Fatal(err)
				}
				if err := gb.WriteBytes(fv, bf16Bytes(vc)); err != nil {
					t.Fatal(err)
				}
				ref := host(t, runtime.F32, nil, 1, c.H, c.d)
				full := func(v []float32) []float32 {
					return append(append([]float32(nil), v...), make([]float32, (c.C-n)*row)...)
				}
				if err := cb.AttentionWindow(ref, host(t, runtime.F32, q, 1, c.H, c.d), host(t, runtime.F32, full(kc), c.C, c.K, c.d),
					host(t, runtime.F32, full(vc), c.C, c.K, c.d), c.pos0, c.window); err != nil {
					t.Fatal(err)
				}
				gb.LegacyDecodeAttention, gb.ForceMMADecode = legacy, !legacy // G = 8 too on the tensor cores
				defer func() { gb.LegacyDecodeAttention, gb.ForceMMADecode = legacyDecodeFromEnv(), false }()
				gq := gpu(t, runtime.BF16, q, 1, c.H, c.d)
				for rep := range 3 {
					out := poisoned(t, runtime.BF16, 1, c.H, c.d)
					if err := gb.AttentionWindow(out, gq, gkc, gvc, c.pos0, c.window); err != nil {
						t.Fatal(err)
					}
					compare(t, fmt.Sprintf("decode attention, run %d", rep), read(t, out), ref.F32(), 1e-2, 2e-2)
				}
			})
		}
	}
}

// TestPagedDecodeMMA: batched decode over a paged pool with shuffled block
// tables (rows outside them NaN) through the tensor-core kernel and the
// legacy kernels, against the CPU reference: a few long sequences (many
// splits, merged by the last block), 64 sequences of about 520 positions
// (the batch-64 benchmark's shape) and 300 short ones (one split, written
// directly), with and without a window; each twice so that counters left
// non-zero would show.
func TestPagedDecodeMMA(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	mixed := func(n, lo, hi int) []pagedSeq {
		s := make([]pagedSeq, n)
		for i := range s {
			s[i] = pagedSeq{1, lo + rng.IntN(hi-lo+1)}
		}
		return s
	}
	for _, c := range []struct {
		name                string
		H, K, d, bs, window int
		seqs                []pagedSeq
	}{
		{"3 long d128", 32, 8, 128, 16, 0, []pagedSeq{{1, 3000}, {1, 1}, {1, 4097}}},
		{"64 at 520 d128", 32, 8, 128, 16, 0, mixed(64, 500, 540)},
		{"300 short d128 G8", 64, 8, 128, 16, 0, mixed(300, 1, 90)},
		{"17 mixed d64 G1 bs 32", 8, 8, 64, 32, 0, mixed(17, 1, 700)},
		{"9 mixed d128 window 50", 32, 8, 128, 16, 50, mixed(9, 1, 400)},
		{"5 mixed d64 G2 bs 8", 4, 2, 64, 8, 0, mixed(5, 1, 1000)},
	} {
		for _, legacy := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s legacy %v", c.name, legacy), func(t *testing.T) {
				kv, qStarts, kp, vp, P := pagedLayout(rng, c.seqs, c.K, c.d, c.bs)
				T := len(c.seqs)
				q := randBF16(rng, T*c.H*c.d, 2)
				ref := host(t, runtime.F32, nil, T, c.H, c.d)
				if err := cb.VarlenPrefillAttention(ref, host(t, runtime.F32, q, T, c.H, c.d), host(t, runtime.F32, kp, P, c.K, c.d),
					host(t, runtime.F32, vp, P, c.K, c.d), qStarts, kv, c.window); err != nil {
					t.Fatal(err)
				}
				gb.LegacyDecodeAttention = legacy
				defer func() { gb.LegacyDecodeAttention = legacyDecodeFromEnv() }()
				gq := gpu(t, runtime.BF16, q, T, c.H, c.d)
				gk, gv := gpu(t, runtime.BF16, kp, P, c.K, c.d), gpu(t, runtime.BF16, vp, P, c.K, c.d)
				for rep := range 2 {
					out := poisoned(t, runtime.BF16, T, c.H, c.d)
					if err := gb.PagedDecodeAttention(out, gq, gk, gv, kv, c.window); err != nil {
						t.Fatal(err)
					}
					compare(t, fmt.Sprintf("PagedDecodeAttention, run %d", rep), read(t, out), ref.F32(), 1e-2, 2e-2)
				}
			})
		}
	}
}
