//go:build cuda

package cudabackend

import (
	"math"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// llamaInvFreq are the d/2 rotary frequencies of base 500,000.
func llamaInvFreq(d int) []float32 {
	inv := make([]float32, d/2)
	for i := range inv {
		inv[i] = float32(math.Pow(500000, -2*float64(i)/float64(d)))
	}
	return inv
}

// TestProjectRoPEStoreRowsGPU: the fused q/k/v GEMM with RoPE and the
// KV-cache store gives what three GEMMs and the RoPE + store kernel give
// (within twice mergedTol: it rotates the fp32 products, the separate path
// their bf16 roundings) in q, k, v and the cache rows written, over the
// paged pool (two sequences' rows at scattered slots) and a contiguous
// cache (from position 100, and up to its last row), at a small shape and
// Llama-3-8B's; rows of the cache it does not write stay untouched. Calls
// it does not take (switched off, too few rows, head width 64) write
// nothing; positions of the wrong count, a slot past the pool or rows past
// a contiguous cache's end are errors.
func TestProjectRoPEStoreRowsGPU(t *testing.T) {
	needGPU(t)
	if gdev.ComputeCapability() != 90 {
		t.Skipf("compute capability %d: no wgmma", gdev.ComputeCapability())
	}
	checkFusedKernels(t)
	defer func(on bool) { gb.QKVGEMM = on }(gb.QKVGEMM)
	rng := newRNG(t)
	const d = 128
	inv := llamaInvFreq(d)
	type operands struct {
		a             kernels.QKVRoPERows
		x, wq, wk, wv *runtime.Tensor
	}
	build := func(T, D, H, KV, C int, paged bool, pos0 int) operands {
		x := gpu(t, runtime.BF16, randBF16(rng, T*D, 1), T, D)
		s := float32(2 / math.Sqrt(float64(D)))
		wq := gpu(t, runtime.BF16, randBF16(rng, H*d*D, s), H*d, D)
		wk := gpu(t, runtime.BF16, randBF16(rng, KV*d*D, s), KV*d, D)
		wv := gpu(t, runtime.BF16, randBF16(rng, KV*d*D, s), KV*d, D)
		a := kernels.QKVRoPERows{Q: poisoned(t, runtime.BF16, T, H, d), K: poisoned(t, runtime.BF16, T, KV, d), V: poisoned(t, runtime.BF16, T, KV, d),
			X: x, WQ: wq, WK: wk, WV: wv, KCache: poisoned(t, runtime.BF16, C, KV, d), VCache: poisoned(t, runtime.BF16, C, KV, d), Pos: pos0, InvFreq: inv}
		if paged {
			perm := rng.Perm(C)
			for r := range T {
				a.Positions = append(a.Positions, int32(r%(T/2+1)+7)) // two sequences from position 7
				a.Slots = append(a.Slots, int32(perm[r]))
			}
		}
		return operands{a, x, wq, wk, wv}
	}
	for _, c := range []struct {
		name           string
		T, D, H, KV, C int
		paged          bool
		pos0           int
	}{
		{"paged", 300, 256, 4, 2, 512, true, 0},
		{"contiguous", 384, 192, 2, 2, 1024, false, 100},
		{"contiguous to the end", 300, 128, 4, 2, 512, false, 212},
		{"Llama-3-8B paged", 512, 4096, 32, 8, 1024, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := build(c.T, c.D, c.H, c.KV, c.C, c.paged, c.pos0)
			want := got
			want.a.Q, want.a.K, want.a.V = poisoned(t, runtime.BF16, c.T, c.H, d), poisoned(t, runtime.BF16, c.T, c.KV, d), poisoned(t, runtime.BF16, c.T, c.KV, d)
			want.a.KCache, want.a.VCache = poisoned(t, runtime.BF16, c.C, c.KV, d), poisoned(t, runtime.BF16, c.C, c.KV, d)
			gb.QKVGEMM = true
			ran, err := gb.ProjectRoPEStoreRows(got.a)
			if err != nil || !ran {
				t.Fatalf("ran %v, error %v", ran, err)
			}
			for _, p := range []struct{ out, w *runtime.Tensor }{{want.a.Q, want.wq}, {want.a.K, want.wk}, {want.a.V, want.wv}} {
				if err := gb.MatMul(p.out, want.x, p.w); err != nil {
					t.Fatal(err)
				}
			}
			if c.paged {
				err = gb.RoPEStoreKVAt(want.a.Q, want.a.K, want.a.V, want.a.KCache, want.a.VCache, want.a.Positions, want.a.Slots, inv)
			} else {
				err = gb.RoPEStoreKV(want.a.Q, want.a.K, want.a.V, want.a.KCache, want.a.VCache, c.pos0, inv)
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []struct {
				name      string
				got, want *runtime.Tensor
			}{{"q", got.a.Q, want.a.Q}, {"k", got.a.K, want.a.K}, {"v", got.a.V, want.a.V},
				{"k cache", got.a.KCache, want.a.KCache}, {"v cache", got.a.VCache, want.a.VCache}} {
				g, w := read(t, p.got), read(t, p.want)
				for i := range g { // rows neither wrote stay NaN in both
					if math.IsNaN(float64(g[i])) != math.IsNaN(float64(w[i])) {
						t.Fatalf("%s element %d: fused %v, separate %v (one wrote it, the other not)", p.name, i, g[i], w[i])
					}
					if math.IsNaN(float64(g[i])) {
						g[i], w[i] = 0, 0
					}
				}
				compare(t, p.name, g, w, 2*mergedTol, mergedTol)
			}
		})
	}

	base := build(300, 128, 2, 2, 512, true, 0)
	for _, c := range []struct {
		name string
		on   bool
		a    func(kernels.QKVRoPERows) kernels.QKVRoPERows
	}{
		{"switched off", false, func(a kernels.QKVRoPERows) kernels.QKVRoPERows { return a }},
		{"too few rows", true, func(kernels.QKVRoPERows) kernels.QKVRoPERows { return build(200, 128, 2, 2, 512, true, 0).a }},
		{"head width 64", true, func(a kernels.QKVRoPERows) kernels.QKVRoPERows {
			a.InvFreq = llamaInvFreq(64)
			a.Q, _ = a.Q.Reshape(300, 4, 64)
			a.K, _ = a.K.Reshape(300, 4, 64)
			a.V, _ = a.V.Reshape(300, 4, 64)
			a.KCache, _ = a.KCache.Reshape(512, 4, 64)
			a.VCache, _ = a.VCache.Reshape(512, 4, 64)
			return a
		}},
	} {
		a := c.a(base.a)
		gb.QKVGEMM = c.on
		ran, err := gb.ProjectRoPEStoreRows(a)
		if ran || err != nil {
			t.Errorf("%s: ran %v, error %v; want not taken", c.name, ran, err)
		}
		for _, o := range []*runtime.Tensor{a.Q, a.K, a.V, a.KCache, a.VCache} {
			for i, v := range read(t, o) {
				if !math.IsNaN(float64(v)) {
					t.Fatalf("%s: a call not taken wrote element %d of %v", c.name, i, o.Shape())
				}
			}
		}
	}
	gb.QKVGEMM = true
	for _, c := range []struct {
		name, want string
		a          func(kernels.QKVRoPERows) kernels.QKVRoPERows
	}{
		{"positions short", "positions", func(a kernels.QKVRoPERows) kernels.QKVRoPERows { a.Positions = a.Positions[:10]; return a }},
		{"slot past the pool", "cache row", func(a kernels.QKVRoPERows) kernels.QKVRoPERows {
			a.Slots = append([]int32{512}, a.Slots[1:]...)
			return a
		}},
		{"rows past the cache", "past the cache", func(a kernels.QKVRoPERows) kernels.QKVRoPERows {
			a.Positions, a.Slots, a.Pos = nil, nil, 213
			return a
		}},
	} {
		if _, err := gb.ProjectRoPEStoreRows(c.a(base.a)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.name, err, c.want)
		}
	}
}
