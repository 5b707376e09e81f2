//go:build cuda

package cudabackend

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// withVarlenContig runs f with Backend.VarlenContig on or off and wg6 as
// the prefill variant, restoring the environment's defaults after.
func withVarlenContig(on bool, f func()) { withVarlenContigVariant("wg6", on, f) }

// withVarlenContigVariant is withVarlenContig with the prefill variant
// named.
func withVarlenContigVariant(variant string, on bool, f func()) {
	gb.VarlenContig = on
	defer func() { gb.VarlenContig = varlenContigFromEnv() }()
	withPrefill(variant, f)
}

// packedCase lays out fresh sequences of the given lengths twice: as a
// paged pool with shuffled 16-position blocks (pagedLayout: rows outside
// the tables NaN) and as the packed rows k, v [T,K,d] of the same values
// (the forward's own rows), returned with the layout and query starts.
func packedCase(rng *rand.Rand, lens []int, K, d int) (kv kernels.PagedKV, qStarts []int32, kp, vp []float32, P int, k, v []float32) {
	seqs := make([]pagedSeq, len(lens))
	for i, n := range lens {
		seqs[i] = pagedSeq{n, n}
	}
	kv, qStarts, kp, vp, P = pagedLayout(rng, seqs, K, d, 16)
	row := K * d
	T := int(qStarts[len(lens)])
	k, v = make([]float32, T*row), make([]float32, T*row)
	for s, n := range lens {
		for p := range n {
			r := int(kv.BlockTable[s*kv.MaxBlocks+p/16])*16 + p%16
			dst := (int(qStarts[s]) + p) * row
			copy(k[dst:dst+row], kp[r*row:(r+1)*row])
			copy(v[dst:dst+row], vp[r*row:(r+1)*row])
		}
	}
	return
}

// padded makes a GPU tensor of T rows (of inner shape) holding vals inside
// one with pad NaN rows before and after, and returns the view of the T
// rows: a kernel reading past either end poisons its output.
func padded(t *testing.T, vals []float32, T, pad int, inner ...int) *runtime.Tensor {
	t.Helper()
	all := poisoned(t, runtime.BF16, append([]int{T + 2*pad}, inner...)...)
	view, err := all.Slice(pad, pad+T)
	if err != nil {
		t.Fatal(err)
	}
	if err := gb.WriteBytes(view, bf16Bytes(vals)); err != nil {
		t.Fatal(err)
	}
	return view
}

// TestVarlenContigKernels: the packed prefill attention of fresh sequences
// (FT_VARLEN_CONTIG, wg6's attn_varlen_contig_prefill_wg6_*) over the
// packed k, v rows gives the paged varlen path's output (wg6 over a pool
// with shuffled blocks holding the same rows) bit for bit, wg's paged
// output within a bf16 unit (bf16Far: the same sums), and the CPU reference
// holds within tolerance, on mixed lengths: 1 and 2 tokens, exact
// multiples of the 128-row tile and one past, lengths not multiples of the
// tile; GQA 1, 2, 4 and 8 query heads a KV head; head widths 64 and 128;
// sliding windows; 64 × 512 at Llama-3-8B's heads (32 and 8, width 128;
// the CPU reference there on four sequences). The packed rows sit between
// NaN rows. Off compute capability 9.0 it checks that the call declines.
func TestVarlenContigKernels(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	rep := func(n, times int) []int {
		out := make([]int, times)
		for i := range out {
			out[i] = n
		}
		return out
	}
	for _, c := range []struct {
		name         string
		H, K, d, win int
		lens         []int
		refSeqs      []int // sequences checked against the CPU reference (nil: all)
	}{
		{"d128 G4", 32, 8, 128, 0, []int{1, 300, 129, 77, 128, 2, 513}, nil},
		{"d128 G1 window 100", 4, 4, 128, 100, []int{257, 1, 200, 3, 700}, nil},
		{"d128 G2 window 3", 4, 2, 128, 3, []int{70, 33, 1, 129}, nil},
		{"d64 G1 window 40", 4, 4, 64, 40, []int{130, 65, 3, 1}, nil},
		{"d64 G8", 8, 1, 64, 0, []int{255, 2, 129, 1, 384}, nil},
		{"d64 G2", 8, 4, 64, 0, []int{700, 1, 256, 65}, nil},
		{"64x512 d128 G4", 32, 8, 128, 0, rep(512, 64), []int{0, 1, 31, 63}},
	} {
		t.Run(c.name, func(t *testing.T) {
			kv, qStarts, kp, vp, P, k, v := packedCase(rng, c.lens, c.K, c.d)
			T := int(qStarts[len(c.lens)])
			q := randBF16(rng, T*c.H*c.d, 2)
			gq := padded(t, q, T, 3, c.H, c.d)
			gk, gv := padded(t, k, T, 3, c.K, c.d), padded(t, v, T, 3, c.K, c.d)
			gkp, gvp := gpu(t, runtime.BF16, kp, P, c.K, c.d), gpu(t, runtime.BF16, vp, P, c.K, c.d)

			pagedRun := func(variant string) []float32 {
				paged := poisoned(t, runtime.BF16, T, c.H, c.d)
				var err error
				withVarlenContigVariant(variant, false, func() { err = gb.VarlenPrefillAttention(paged, gq, gkp, gvp, qStarts, kv, c.win) })
				if err != nil {
					t.Fatal(err)
				}
				return read(t, paged)
			}
			out := poisoned(t, runtime.BF16, T, c.H, c.d)
			var ran bool
			var err error
			withVarlenContig(true, func() { ran, err = gb.PackedPrefillAttention(out, gq, gk, gv, qStarts, c.win) })
			if err != nil {
				t.Fatal(err)
			}
			if gdev.ComputeCapability() != 90 {
				if ran {
					t.Errorf("ran off compute capability 9.0 (no sm_90a module)")
				}
				t.Skipf("compute capability %d: the packed path declines (wg6 is sm_90a)", gdev.ComputeCapability())
			}
			if !ran {
				t.Fatalf("declined on compute capability 9.0, head width %d", c.d)
			}
			got := read(t, out)
			if n := countDiffer(got, pagedRun("wg6")); n > 0 {
				t.Errorf("%d of %d outputs differ from the paged varlen path's (same kernel body, same key order)", n, len(got))
			}
			wg := pagedRun("wg")
			if far := bf16Far(got, wg); far > 0 {
				t.Errorf("%d of %d packed outputs further than a bf16 unit from wg's (same sums, same order)", far, len(got))
			}
			t.Logf("%d of %d packed outputs differ from wg's", countDiffer(got, wg), len(got))
			seqs := c.refSeqs
			if seqs == nil {
				for s := range c.lens {
					seqs = append(seqs, s)
				}
			}
			hd := c.H * c.d
			for _, s := range seqs {
				lo, hi := int(qStarts[s]), int(qStarts[s+1])
				n := hi - lo
				ref := host(t, runtime.F32, nil, n, c.H, c.d)
				row := c.K * c.d
				if err := cb.AttentionWindow(ref, host(t, runtime.F32, q[lo*hd:hi*hd], n, c.H, c.d),
					host(t, runtime.F32, k[lo*row:hi*row], n, c.K, c.d), host(t, runtime.F32, v[lo*row:hi*row], n, c.K, c.d), 0, c.win); err != nil {
					t.Fatal(err)
				}
				compare(t, "PackedPrefillAttention", got[lo*hd:hi*hd], ref.F32(), 1e-2, 2e-2)
			}
		})
	}
}

// TestVarlenContigDeclines: PackedPrefillAttention does nothing and says so
// with the switch off, with LegacyFlash, with a variant without the packed
// kernel (fa2) and at head width 32 (no wg6 kernel), leaving the output
// untouched; bad input is an error naming the problem even when on.
func TestVarlenContigDeclines(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct {
		name string
		d    int
		set  func()
	}{
		{"off", 128, func() { gb.VarlenContig = false }},
		{"legacy flash", 128, func() { gb.LegacyFlash = true }},
		{"fa2", 128, func() { gb.PrefillVariant = "fa2" }},
		{"d32", 32, func() {}},
	} {
		t.Run(c.name, func(t *testing.T) {
			const T, H, K = 40, 4, 2
			gq := gpu(t, runtime.BF16, randBF16(rng, T*H*c.d, 1), T, H, c.d)
			gk := gpu(t, runtime.BF16, randBF16(rng, T*K*c.d, 1), T, K, c.d)
			out := poisoned(t, runtime.BF16, T, H, c.d)
			var ran bool
			var err error
			withVarlenContig(true, func() {
				c.set()
				ran, err = gb.PackedPrefillAttention(out, gq, gk, gk, []int32{0, 25, 40}, 0)
			})
			if err != nil || ran {
				t.Fatalf("ran %v, err %v: want a quiet decline", ran, err)
			}
			for i, x := range read(t, out) {
				if !math.IsNaN(float64(x)) {
					t.Fatalf("output %d written by a declined call", i)
				}
			}
		})
	}
	const T, H, K, d = 40, 4, 2, 128
	gq := gpu(t, runtime.BF16, nil, T, H, d)
	gk := gpu(t, runtime.BF16, nil, T, K, d)
	out := gpu(t, runtime.BF16, nil, T, H, d)
	short := gpu(t, runtime.BF16, nil, T-1, K, d)
	f32 := gpu(t, runtime.F32, nil, T, K, d)
	for _, c := range []struct {
		name    string
		k       *runtime.Tensor
		qStarts []int32
		window  int
		want    string
	}{
		{"starts past T", gk, []int32{0, 41}, 0, "from 0 to the 40 rows"},
		{"decreasing starts", gk, []int32{0, 30, 20, 40}, 0, "decrease"},
		{"k rows", short, []int32{0, 40}, 0, "want [T,H,d] and [T,K,d]"},
		{"negative window", gk, []int32{0, 40}, -2, "negative"},
		{"f32 k", f32, []int32{0, 40}, 0, "BF16"},
	} {
		var err error
		withVarlenContig(true, func() { _, err = gb.PackedPrefillAttention(out, gq, c.k, c.k, c.qStarts, c.window) })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}
