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

// sameBits reports the first index where got and want differ bit for bit
// (-1: none).
func sameBits(got, want []float32) int {
	if len(got) != len(want) {
		return 0
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return i
		}
	}
	return -1
}

// TestProjectRoPEStoreKVGPU: gemv3_rope_store_bf16 leaves in q, k, v and
// both caches bit for bit what MatMulN (gemv3_bf16), AddBias per bias and
// RoPEStoreKV (rope_store_bf16) leave, over head widths 64 and 128 (and
// 32), GQA ratios 1, 3, 4, 7 and 8, with and without biases, every rotary
// scaling the decoder reads (default, linear, llama3, yarn, longrope: they
// differ only in the frequency table), positions 0, 1, 1000 and the last
// row of a 4,096-row cache; and the CPU reference's values within bf16
// rounding. Declines (FT_FUSE_ROPE=0, a width not a multiple of 8) enqueue
// nothing; bad shapes are errors.
func TestProjectRoPEStoreKVGPU(t *testing.T) {
	needGPU(t)
	if gb.NoFusedRoPE {
		gb.NoFusedRoPE = false
		defer func() { gb.NoFusedRoPE = true }()
	}
	rng := newRNG(t)
	const C = 4096
	scalings := []struct {
		name  string
		theta float64
		s     kernels.RopeScaling
	}{
		{"default", 10000, kernels.RopeScaling{}},
		{"linear", 10000, kernels.RopeScaling{Type: "linear", Factor: 4}},
		{"llama3", 500000, kernels.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192}},
		{"yarn", 1000000, kernels.RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositions: 32768}},
		{"longrope", 10000, kernels.RopeScaling{Type: "longrope"}},
	}
	for _, c := range []struct {
		D, H, KV, d int
		bias        bool
	}{
		{4096, 32, 8, 128, false}, // Llama 3 8B
		{2048, 16, 16, 128, true}, // GQA 1
		{1024, 16, 2, 64, false},  // GQA 8, d 64
		{896, 14, 2, 64, true},    // Qwen2 0.5B: GQA 7, biases
		{576, 9, 3, 64, true},     // GQA 3
		{256, 8, 2, 32, false},
	} {
		t.Run(fmt.Sprintf("D%d_H%d_KV%d_d%d_bias%v", c.D, c.H, c.KV, c.d, c.bias), func(t *testing.T) {
			Nq, Nkv := c.H*c.d, c.KV*c.d
			s := float32(1 / math.Sqrt(float64(c.D)))
			xv := randBF16(rng, c.D, 1)
			wq, wk, wv := randBF16(rng, Nq*c.D, s), randBF16(rng, Nkv*c.D, s), randBF16(rng, Nkv*c.D, s)
			bq, bk, bv := randBF16(rng, Nq, 0.5), randBF16(rng, Nkv, 0.5), randBF16(rng, Nkv, 0.5)
			x := gpu(t, runtime.BF16, xv, 1, c.D)
			ws := []*runtime.Tensor{gpu(t, runtime.BF16, wq, Nq, c.D), gpu(t, runtime.BF16, wk, Nkv, c.D), gpu(t, runtime.BF16, wv, Nkv, c.D)}
			var bs [3]*runtime.Tensor
			if c.bias {
				bs = [3]*runtime.Tensor{gpu(t, runtime.BF16, bq, Nq), gpu(t, runtime.BF16, bk, Nkv), gpu(t, runtime.BF16, bv, Nkv)}
			}
			kc0, vc0 := randBF16(rng, C*Nkv, 1), randBF16(rng, C*Nkv, 1)
			uk, uv := gpu(t, runtime.BF16, kc0, C, c.KV, c.d), gpu(t, runtime.BF16, vc0, C, c.KV, c.d) // the unfused path's caches
			fk, fv := gpu(t, runtime.BF16, kc0, C, c.KV, c.d), gpu(t, runtime.BF16, vc0, C, c.KV, c.d) // the fused kernel's
			hx, hq, hk, hv := host(t, runtime.F32, xv, 1, c.D), host(t, runtime.BF16, wq, Nq, c.D), host(t, runtime.BF16, wk, Nkv, c.D), host(t, runtime.BF16, wv, Nkv, c.D)
			uq, ukx, uvx := poisoned(t, runtime.BF16, 1, c.H, c.d), poisoned(t, runtime.BF16, 1, c.KV, c.d), poisoned(t, runtime.BF16, 1, c.KV, c.d)
			fq, fkx, fvx := poisoned(t, runtime.BF16, 1, c.H, c.d), poisoned(t, runtime.BF16, 1, c.KV, c.d), poisoned(t, runtime.BF16, 1, c.KV, c.d)
			for _, sc := range scalings {
				if sc.s.Type == "longrope" {
					sc.s.ShortFactor = make([]float64, c.d/2)
					for i := range sc.s.ShortFactor {
						sc.s.ShortFactor[i] = 1 + float64(i)/8
					}
				}
				inv, err := kernels.RopeInvFreq(c.d, sc.theta, sc.s)
				if err != nil {
					t.Fatal(err)
				}
				for _, pos := range []int{0, 1, 1000, C - 1} {
					what := fmt.Sprintf("%s, position %d", sc.name, pos)
					if err := gb.MatMulN([]*runtime.Tensor{uq, ukx, uvx}, x, ws); err != nil {
						t.Fatal(err)
					}
					for i, o := range []*runtime.Tensor{uq, ukx, uvx} {
						if bs[i] == nil {
							continue
						}
						rows, err := o.Reshape(1, o.NumElements())
						if err != nil {
							t.Fatal(err)
						}
						if err := gb.AddBias(rows, bs[i]); err != nil {
							t.Fatal(err)
						}
					}
					if err := gb.RoPEStoreKV(uq, ukx, uvx, uk, uv, pos, inv); err != nil {
						t.Fatal(err)
					}
					a := kernels.QKVRoPE{Q: fq, K: fkx, V: fvx, X: x, WQ: ws[0], WK: ws[1], WV: ws[2], BQ: bs[0], BK: bs[1], BV: bs[2],
						KCache: fk, VCache: fv, Pos: pos, InvFreq: inv}
					if ran, err := gb.ProjectRoPEStoreKV(a); err != nil || !ran {
						t.Fatalf("%s: ran %v, %v", what, ran, err)
					}
					for _, p := range []struct {
						n        string
						got, unf *runtime.Tensor
					}{{"q", fq, uq}, {"k", fkx, ukx}, {"v", fvx, uvx}} {
						g, w := read(t, p.got), read(t, p.unf)
						if i := sameBits(g, w); i >= 0 {
							t.Fatalf("%s: %s[%d] = %v, the unfused path %v", what, p.n, i, g[i], w[i])
						}
					}
					if pos == 1000 {
						// The CPU reference (fp32 projections, float64 cos and sin).
						ref := kernels.QKVRoPE{Q: host(t, runtime.F32, nil, 1, c.H, c.d), K: host(t, runtime.F32, nil, 1, c.KV, c.d),
							V: host(t, runtime.F32, nil, 1, c.KV, c.d), X: hx, WQ: hq, WK: hk, WV: hv,
							KCache: host(t, runtime.F32, nil, pos+1, c.KV, c.d), VCache: host(t, runtime.F32, nil, pos+1, c.KV, c.d), Pos: pos, InvFreq: inv}
						if c.bias {
							ref.BQ, ref.BK, ref.BV = host(t, runtime.F32, bq, Nq), host(t, runtime.F32, bk, Nkv), host(t, runtime.F32, bv, Nkv)
						}
						if err := kernels.ProjectRoPEStoreKVRef(cb, ref); err != nil {
							t.Fatal(err)
						}
						compare(t, what+": q against the CPU", read(t, fq), ref.Q.F32(), 1e-2, 1e-2)
						compare(t, what+": k against the CPU", read(t, fkx), ref.K.F32(), 1e-2, 1e-2)
						compare(t, what+": v against the CPU", read(t, fvx), ref.V.F32(), 1e-2, 1e-2)
					}
				}
				for _, p := range []struct {
					n        string
					got, unf *runtime.Tensor
				}{{"k cache", fk, uk}, {"v cache", fv, uv}} {
					g, w := read(t, p.got), read(t, p.unf)
					if i := sameBits(g, w); i >= 0 {
						t.Fatalf("%s: %s element %d (row %d) = %v, the unfused path %v", sc.name, p.n, i, i/Nkv, g[i], w[i])
					}
				}
			}
		})
	}
	t.Run("declines", func(t *testing.T) {
		const H, KV, d, D = 4, 2, 64, 100 // D not a multiple of 8
		inv, err := kernels.RopeInvFreq(d, 10000, kernels.RopeScaling{})
		if err != nil {
			t.Fatal(err)
		}
		args := func(D int) kernels.QKVRoPE {
			return kernels.QKVRoPE{Q: poisoned(t, runtime.BF16, 1, H, d), K: poisoned(t, runtime.BF16, 1, KV, d), V: poisoned(t, runtime.BF16, 1, KV, d),
				X: gpu(t, runtime.BF16, randBF16(rng, D, 1), 1, D), WQ: gpu(t, runtime.BF16, randBF16(rng, H*d*D, 0.1), H*d, D),
				WK: gpu(t, runtime.BF16, randBF16(rng, KV*d*D, 0.1), KV*d, D), WV: gpu(t, runtime.BF16, randBF16(rng, KV*d*D, 0.1), KV*d, D),
				KCache: poisoned(t, runtime.BF16, 8, KV, d), VCache: poisoned(t, runtime.BF16, 8, KV, d), Pos: 3, InvFreq: inv}
		}
		untouched := func(what string, a kernels.QKVRoPE) {
			t.Helper()
			for _, x := range []*runtime.Tensor{a.Q, a.K, a.V, a.KCache, a.VCache} {
				for _, v := range read(t, x) {
					if !math.IsNaN(float64(v)) {
						t.Fatalf("%s: a declined call wrote its outputs", what)
					}
				}
			}
		}
		a := args(D)
		if ran, err := gb.ProjectRoPEStoreKV(a); ran || err != nil {
			t.Errorf("width %d: ran %v, %v; want a decline", D, ran, err)
		}
		untouched("width 100", a)
		gb.NoFusedRoPE = true
		a = args(128)
		ran, err := gb.ProjectRoPEStoreKV(a)
		gb.NoFusedRoPE = false
		if ran || err != nil {
			t.Errorf("NoFusedRoPE: ran %v, %v; want a decline", ran, err)
		}
		untouched("NoFusedRoPE", a)
		a = args(128)
		a.Pos = 8
		if _, err := gb.ProjectRoPEStoreKV(a); err == nil || !strings.Contains(err.Error(), "position 8 outside the cache's 8 rows") {
			t.Errorf("position past the cache: error %v", err)
		}
	})
}
