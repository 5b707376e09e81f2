//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// normRoPEOperands are one call's tensors on the GPU: q [T,H,d], k and v
// [T,KV,d], the caches [C,KV,d] (filled with kc0 and vc0) and the norm
// weights (shared between sets).
type normRoPEOperands struct{ q, k, v, kc, vc *runtime.Tensor }

// TestNormRoPEStoreKVGPU: qknorm_rope_store_bf16 leaves in q, k and both
// caches bit for bit what PairRMSNorm (rmsnorm_pair_bf16_v8) then
// RoPEStoreKV (rope_store_bf16, or its v8 twin from 16 tokens) leave, on
// Qwen3-8B's heads (32 q, 8 KV, d 128), d 64, a tiny shape (d 8) and
// prefills of 5 and 20 tokens (FT_QKNORM_ROPE=all), at positions 0, 1,
// 1000 and the cache's last rows; and the CPU reference's values within
// bf16 rounding. A graph captured at one position replays at others as
// the eager op runs there. Declines (switched off, more tokens than
// QKNormRoPETokens, d not a multiple of 8) enqueue nothing; bad shapes are
// errors.
func TestNormRoPEStoreKVGPU(t *testing.T) {
	needGPU(t)
	defer func(n int) { gb.QKNormRoPETokens = n }(gb.QKNormRoPETokens)
	gb.QKNormRoPETokens = -1
	rng := newRNG(t)
	const C, eps = 2048, 1e-6
	for _, c := range []struct{ T, H, KV, d int }{
		{1, 32, 8, 128}, // Qwen3-8B
		{1, 16, 2, 64},
		{1, 2, 1, 8},
		{5, 32, 8, 128},
		{20, 8, 4, 64},
	} {
		t.Run(fmt.Sprintf("T%d_H%d_KV%d_d%d", c.T, c.H, c.KV, c.d), func(t *testing.T) {
			inv, err := kernels.RopeInvFreq(c.d, 1e6, kernels.RopeScaling{})
			if err != nil {
				t.Fatal(err)
			}
			nq, nkv := c.T*c.H*c.d, c.T*c.KV*c.d
			wqv, wkv := randBF16(rng, c.d, 1), randBF16(rng, c.d, 1)
			wq, wk := gpu(t, runtime.BF16, wqv, c.d), gpu(t, runtime.BF16, wkv, c.d)
			kc0, vc0 := randBF16(rng, C*c.KV*c.d, 1), randBF16(rng, C*c.KV*c.d, 1)
			mk := func(q, k, v []float32) normRoPEOperands {
				return normRoPEOperands{q: gpu(t, runtime.BF16, q, c.T, c.H, c.d), k: gpu(t, runtime.BF16, k, c.T, c.KV, c.d),
					v: gpu(t, runtime.BF16, v, c.T, c.KV, c.d), kc: gpu(t, runtime.BF16, kc0, C, c.KV, c.d), vc: gpu(t, runtime.BF16, vc0, C, c.KV, c.d)}
			}
			unfused := func(o normRoPEOperands, pos int) {
				t.Helper()
				qh, _ := o.q.Reshape(c.T*c.H, c.d)
				kh, _ := o.k.Reshape(c.T*c.KV, c.d)
				if err := gb.PairRMSNorm(qh, wq, kh, wk, eps); err != nil {
					t.Fatal(err)
				}
				if err := gb.RoPEStoreKV(o.q, o.k, o.v, o.kc, o.vc, pos, inv); err != nil {
					t.Fatal(err)
				}
			}
			args := func(o normRoPEOperands, pos int) kernels.QKNormRoPE {
				return kernels.QKNormRoPE{Q: o.q, K: o.k, V: o.v, QNorm: wq, KNorm: wk, Eps: eps, KCache: o.kc, VCache: o.vc, Pos: pos, InvFreq: inv}
			}
			fused := func(o normRoPEOperands, pos int) {
				t.Helper()
				if ran, err := gb.NormRoPEStoreKV(args(o, pos)); err != nil || !ran {
					t.Fatalf("position %d: ran %v, %v", pos, ran, err)
				}
			}
			same := func(what string, got, want normRoPEOperands) {
				t.Helper()
				for _, p := range []struct {
					n        string
					got, unf *runtime.Tensor
				}{{"q", got.q, want.q}, {"k", got.k, want.k}, {"v", got.v, want.v}, {"k cache", got.kc, want.kc}, {"v cache", got.vc, want.vc}} {
					g, w := read(t, p.got), read(t, p.unf)
					if i := sameBits(g, w); i >= 0 {
						t.Fatalf("%s: %s[%d] = %v, want %v", what, p.n, i, g[i], w[i])
					}
				}
			}
			for _, pos := range []int{0, 1, 1000, C - c.T} {
				q, k, v := randBF16(rng, nq, 4), randBF16(rng, nkv, 4), randBF16(rng, nkv, 1)
				u, f := mk(q, k, v), mk(q, k, v)
				unfused(u, pos)
				fused(f, pos)
				same(fmt.Sprintf("position %d against the unfused launches", pos), f, u)
				if pos != 1000 {
					continue
				}
				ref := kernels.QKNormRoPE{Q: host(t, runtime.F32, q, c.T, c.H, c.d), K: host(t, runtime.F32, k, c.T, c.KV, c.d),
					V: host(t, runtime.F32, v, c.T, c.KV, c.d), QNorm: host(t, runtime.F32, wqv, c.d), KNorm: host(t, runtime.F32, wkv, c.d), Eps: eps,
					KCache: host(t, runtime.F32, kc0, C, c.KV, c.d), VCache: host(t, runtime.F32, vc0, C, c.KV, c.d), Pos: pos, InvFreq: inv}
				if err := kernels.NormRoPEStoreKVRef(cb, ref); err != nil {
					t.Fatal(err)
				}
				compare(t, "q against the CPU", read(t, f.q), ref.Q.F32(), 2e-2, 2e-2)
				compare(t, "k against the CPU", read(t, f.k), ref.K.F32(), 2e-2, 2e-2)
				compare(t, "k cache against the CPU", read(t, f.kc), ref.KCache.F32(), 2e-2, 2e-2)
				compare(t, "v cache against the CPU", read(t, f.vc), ref.VCache.F32(), 0, 0)
			}
			if c.T != 1 {
				return
			}
			// Captured once at position 3, replayed at others: the position
			// comes from the step buffer.
			q, k, v := randBF16(rng, nq, 4), randBF16(rng, nkv, 4), randBF16(rng, nkv, 1)
			g, e := mk(q, k, v), mk(q, k, v) // g replays the graph, e runs eagerly
			graph, err := gb.CaptureStep(func() error {
				_, err := gb.NormRoPEStoreKV(args(g, 3))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			defer graph.Close()
			for _, pos := range []int{100, 7, C - 1} {
				// q and k are rewritten in place by each call: new inputs.
				q, k, v := randBF16(rng, nq, 4), randBF16(rng, nkv, 4), randBF16(rng, nkv, 1)
				for _, o := range []normRoPEOperands{g, e} {
					for _, w := range []struct {
						x    *runtime.Tensor
						vals []float32
					}{{o.q, q}, {o.k, k}, {o.v, v}} {
						if err := gb.WriteBytes(w.x, bf16Bytes(w.vals)); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := gb.SetStep([]int32{0}, pos); err != nil {
					t.Fatal(err)
				}
				if err := graph.Replay(); err != nil {
					t.Fatal(err)
				}
				fused(e, pos)
				same(fmt.Sprintf("replay at %d", pos), g, e)
			}
		})
	}
	t.Run("declines", func(t *testing.T) {
		const T, H, KV = 2, 4, 2
		inv := func(d int) []float32 {
			f, err := kernels.RopeInvFreq(d, 1e6, kernels.RopeScaling{})
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
		args := func(d int) kernels.QKNormRoPE {
			return kernels.QKNormRoPE{Q: poisoned(t, runtime.BF16, T, H, d), K: poisoned(t, runtime.BF16, T, KV, d), V: poisoned(t, runtime.BF16, T, KV, d),
				QNorm: gpu(t, runtime.BF16, randBF16(rng, d, 1), d), KNorm: gpu(t, runtime.BF16, randBF16(rng, d, 1), d), Eps: eps,
				KCache: poisoned(t, runtime.BF16, 8, KV, d), VCache: poisoned(t, runtime.BF16, 8, KV, d), Pos: 3, InvFreq: inv(d)}
		}
		untouched := func(what string, a kernels.QKNormRoPE) {
			t.Helper()
			for _, x := range []*runtime.Tensor{a.Q, a.K, a.V, a.KCache, a.VCache} {
				for _, v := range read(t, x) {
					if !math.IsNaN(float64(v)) {
						t.Fatalf("%s: a declined call wrote its outputs", what)
					}
				}
			}
		}
		for _, c := range []struct {
			what   string
			tokens int
			d      int
		}{{"switched off", 0, 64}, {"2 tokens, 1 allowed", 1, 64}, {"width 12", -1, 12}} {
			gb.QKNormRoPETokens = c.tokens
			a := args(c.d)
			ran, err := gb.NormRoPEStoreKV(a)
			if ran || err != nil {
				t.Errorf("%s: ran %v, %v; want a decline", c.what, ran, err)
			}
			untouched(c.what, a)
		}
		gb.QKNormRoPETokens = -1
		a := args(64)
		a.Pos = 7
		if _, err := gb.NormRoPEStoreKV(a); err == nil || !strings.Contains(err.Error(), "2 tokens at position 7 exceed the cache's 8 rows") {
			t.Errorf("position past the cache: error %v", err)
		}
	})
}
