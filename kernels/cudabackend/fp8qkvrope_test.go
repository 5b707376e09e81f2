//go:build cuda

package cudabackend

import (
	"fmt"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestProjectRoPEStoreKVFP8GPU: gemv3_fp8_rope_mm2 and
// gemv3_fp8_rope_norm_mm2 leave in q, k, v and both caches bit for bit what
// the separate ops leave (MatMulNFP8 of x, or NormMatMulNFP8 of the
// residual, then RoPEStoreKV), over Llama-3-8B's shape per channel and in
// 128-blocks, a d-64 shape in 64-blocks, the llama3 rotary scaling,
// positions 0, 1, 1000 and the cache's last row; and the CPU reference's
// values (ProjectRoPEStoreKVFP8Ref: fp32 norm and products) within the FP8
// GEMVs' tolerance. Declines (FT_FP8_FUSE_ROPE=0, a scalar variant)
// enqueue nothing.
func TestProjectRoPEStoreKVFP8GPU(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	const C = 2048
	inv, err := kernels.RopeInvFreq(128, 500000, kernels.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192})
	if err != nil {
		t.Fatal(err)
	}
	inv64, err := kernels.RopeInvFreq(64, 10000, kernels.RopeScaling{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		D, H, KV, d, block int
		sdt                runtime.DType
	}{
		{4096, 32, 8, 128, 0, runtime.BF16},
		{4096, 32, 8, 128, 128, runtime.F32},
		{512, 8, 2, 64, 64, runtime.BF16},
	} {
		layout := kernels.FP8Layout{Block: c.block}
		freq := inv
		if c.d == 64 {
			freq = inv64
		}
		for _, norm := range []bool{false, true} {
			t.Run(fmt.Sprintf("D%d_H%d_KV%d_d%d_%v_norm%v", c.D, c.H, c.KV, c.d, layout, norm), func(t *testing.T) {
				Nq, Nkv := c.H*c.d, c.KV*c.d
				xv := randBF16(rng, c.D, 3)
				nwv := randBF16(rng, c.D, 1)
				for i := range nwv {
					nwv[i] = runtime.BF16ToF32(runtime.F32ToBF16(0.5 + nwv[i]*nwv[i]))
				}
				var x, nw *runtime.Tensor
				if norm {
					x, nw = gpu(t, runtime.F32, xv, 1, c.D), gpu(t, runtime.BF16, nwv, c.D)
				} else {
					x = gpu(t, runtime.BF16, xv, 1, c.D)
				}
				wq, wk, wv := newFP8Weight(t, rng, Nq, c.D, layout, c.sdt), newFP8Weight(t, rng, Nkv, c.D, layout, c.sdt), newFP8Weight(t, rng, Nkv, c.D, layout, c.sdt)
				ws, ss := []*runtime.Tensor{wq.g, wk.g, wv.g}, []*runtime.Tensor{wq.gs, wk.gs, wv.gs}
				kc0, vc0 := randBF16(rng, C*Nkv, 1), randBF16(rng, C*Nkv, 1)
				uk, uv := gpu(t, runtime.BF16, kc0, C, c.KV, c.d), gpu(t, runtime.BF16, vc0, C, c.KV, c.d)
				fk, fv := gpu(t, runtime.BF16, kc0, C, c.KV, c.d), gpu(t, runtime.BF16, vc0, C, c.KV, c.d)
				uq, ukx, uvx := poisoned(t, runtime.BF16, 1, c.H, c.d), poisoned(t, runtime.BF16, 1, c.KV, c.d), poisoned(t, runtime.BF16, 1, c.KV, c.d)
				fq, fkx, fvx := poisoned(t, runtime.BF16, 1, c.H, c.d), poisoned(t, runtime.BF16, 1, c.KV, c.d), poisoned(t, runtime.BF16, 1, c.KV, c.d)
				op := func(pos int) kernels.FP8QKVRoPE {
					a := kernels.FP8QKVRoPE{QKVRoPE: kernels.QKVRoPE{Q: fq, K: fkx, V: fvx, X: x, WQ: wq.g, WK: wk.g, WV: wv.g,
						KCache: fk, VCache: fv, Pos: pos, InvFreq: freq}, SQ: wq.gs, SK: wk.gs, SV: wv.gs, Layout: layout}
					if norm {
						a.Norm, a.Eps = nw, 1e-5
					}
					return a
				}
				for _, pos := range []int{0, 1, 1000, C - 1} {
					what := fmt.Sprintf("position %d", pos)
					outs := []*runtime.Tensor{uq, ukx, uvx}
					if norm {
						if ran, err := gb.NormMatMulNFP8(outs, x, nw, 1e-5, ws, ss, layout); err != nil || !ran {
							t.Fatalf("%s: NormMatMulNFP8 ran %v, %v", what, ran, err)
						}
					} else if err := gb.MatMulNFP8(outs, x, ws, ss, layout); err != nil {
						t.Fatal(err)
					}
					if err := gb.RoPEStoreKV(uq, ukx, uvx, uk, uv, pos, freq); err != nil {
						t.Fatal(err)
					}
					if ran, err := gb.ProjectRoPEStoreKVFP8(op(pos)); err != nil || !ran {
						t.Fatalf("%s: ran %v, %v", what, ran, err)
					}
					for _, p := range []struct {
						n        string
						got, unf *runtime.Tensor
					}{{"q", fq, uq}, {"k", fkx, ukx}, {"v", fvx, uvx}, {"k cache", fk, uk}, {"v cache", fv, uv}} {
						g, w := read(t, p.got), read(t, p.unf)
						if i := sameBits(g, w); i >= 0 {
							t.Fatalf("%s: %s[%d] = %v, the separate ops %v", what, p.n, i, g[i], w[i])
						}
					}
				}
				// The CPU reference at position 1000.
				const pos = 1000
				hx := host(t, runtime.F32, xv, 1, c.D)
				ref := kernels.FP8QKVRoPE{QKVRoPE: kernels.QKVRoPE{Q: host(t, runtime.F32, nil, 1, c.H, c.d), K: host(t, runtime.F32, nil, 1, c.KV, c.d),
					V: host(t, runtime.F32, nil, 1, c.KV, c.d), X: hx, WQ: wq.h, WK: wk.h, WV: wv.h,
					KCache: host(t, runtime.F32, nil, pos+1, c.KV, c.d), VCache: host(t, runtime.F32, nil, pos+1, c.KV, c.d), Pos: pos, InvFreq: freq},
					SQ: wq.hs, SK: wk.hs, SV: wv.hs, Layout: layout}
				if norm {
					ref.Norm, ref.Eps = host(t, runtime.BF16, nwv, c.D), 1e-5
				}
				if err := kernels.ProjectRoPEStoreKVFP8Ref(cb, ref); err != nil {
					t.Fatal(err)
				}
				if ran, err := gb.ProjectRoPEStoreKVFP8(op(pos)); err != nil || !ran {
					t.Fatalf("reference position: ran %v, %v", ran, err)
				}
				compare(t, "q", read(t, fq), ref.Q.F32(), 2e-3, 1e-2)
				compare(t, "k", read(t, fkx), ref.K.F32(), 2e-3, 1e-2)
				compare(t, "v", read(t, fvx), ref.V.F32(), 2e-3, 1e-2)

				// Declines: nothing written.
				for _, d := range []struct {
					n   string
					set func(on bool)
				}{
					{"FT_FP8_FUSE_ROPE=0", func(on bool) { gb.NoFP8FusedRoPE = on }},
					{"FT_FP8_VARIANT=u8r1s", func(on bool) {
						gb.FP8Variant = fp8AutoVariant
						if on {
							gb.FP8Variant = "u8r1s"
						}
					}},
				} {
					d.set(true)
					q := poisoned(t, runtime.BF16, 1, c.H, c.d)
					a := op(pos)
					a.Q = q
					ran, err := gb.ProjectRoPEStoreKVFP8(a)
					d.set(false)
					if ran || err != nil {
						t.Errorf("%s: ran %v (%v), want a decline", d.n, ran, err)
					}
					if got := read(t, q); got[0] == got[0] {
						t.Errorf("%s: q written (%v) by a declined call", d.n, got[0])
					}
				}
			})
		}
	}
}
