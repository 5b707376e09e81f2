//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestProjectNormRoPEGPU: with FuseQKNorm, ProjectRoPEStoreKV over a layer
// with q/k norms (gemv3_qknorm_rope_early_bf16) leaves in q, k, v and both
// caches bit for bit what MatMulN and NormRoPEStoreKV
// (qknorm_rope_store_bf16) leave, on Qwen3-8B's shape (D 4096, 32 q heads,
// 8 KV heads of 128), head widths 64, 16 and 256 (a chunk on every lane),
// at positions 0, 1, 1000 and the cache's last row, call after call (its
// head counters go back to zero); a graph captured at one position replays
// at others as the eager op runs there; and the CPU reference's values
// within bf16 rounding. Declines (switched off, biases, a width not a
// multiple of 16) enqueue nothing.
func TestProjectNormRoPEGPU(t *testing.T) {
	needGPU(t)
	defer func(on bool, n int) { gb.FuseQKNorm, gb.QKNormRoPETokens = on, n }(gb.FuseQKNorm, gb.QKNormRoPETokens)
	gb.FuseQKNorm, gb.QKNormRoPETokens = true, -1
	rng := newRNG(t)
	const C, eps = 2048, 1e-6
	for _, c := range []struct{ D, H, KV, d int }{
		{4096, 32, 8, 128}, // Qwen3-8B
		{1024, 16, 2, 64},
		{256, 8, 4, 16},
		{1024, 4, 2, 256},
	} {
		t.Run(fmt.Sprintf("D%d_H%d_KV%d_d%d", c.D, c.H, c.KV, c.d), func(t *testing.T) {
			Nq, Nkv := c.H*c.d, c.KV*c.d
			s := float32(1 / math.Sqrt(float64(c.D)))
			inv, err := kernels.RopeInvFreq(c.d, 1e6, kernels.RopeScaling{})
			if err != nil {
				t.Fatal(err)
			}
			wqv, wkv, wvv := randBF16(rng, Nq*c.D, s), randBF16(rng, Nkv*c.D, s), randBF16(rng, Nkv*c.D, s)
			ws := []*runtime.Tensor{gpu(t, runtime.BF16, wqv, Nq, c.D), gpu(t, runtime.BF16, wkv, Nkv, c.D), gpu(t, runtime.BF16, wvv, Nkv, c.D)}
			nq, nk := randBF16(rng, c.d, 1), randBF16(rng, c.d, 1)
			wq, wk := gpu(t, runtime.BF16, nq, c.d), gpu(t, runtime.BF16, nk, c.d)
			kc0, vc0 := randBF16(rng, C*Nkv, 1), randBF16(rng, C*Nkv, 1)
			mk := func() normRoPEOperands {
				return normRoPEOperands{poisoned(t, runtime.BF16, 1, c.H, c.d), poisoned(t, runtime.BF16, 1, c.KV, c.d), poisoned(t, runtime.BF16, 1, c.KV, c.d),
					gpu(t, runtime.BF16, kc0, C, c.KV, c.d), gpu(t, runtime.BF16, vc0, C, c.KV, c.d)}
			}
			u, f := mk(), mk() // the unfused launches' and the fused kernel's
			op := func(o normRoPEOperands, x *runtime.Tensor, pos int) kernels.QKVRoPE {
				return kernels.QKVRoPE{Q: o.q, K: o.k, V: o.v, X: x, WQ: ws[0], WK: ws[1], WV: ws[2], KCache: o.kc, VCache: o.vc,
					Pos: pos, InvFreq: inv, QNorm: wq, KNorm: wk, Eps: eps}
			}
			unfused := func(x *runtime.Tensor, pos int) {
				t.Helper()
				if err := gb.MatMulN([]*runtime.Tensor{u.q, u.k, u.v}, x, ws); err != nil {
					t.Fatal(err)
				}
				if ran, err := gb.NormRoPEStoreKV(kernels.QKNormRoPE{Q: u.q, K: u.k, V: u.v, QNorm: wq, KNorm: wk, Eps: eps,
					KCache: u.kc, VCache: u.vc, Pos: pos, InvFreq: inv}); err != nil || !ran {
					t.Fatalf("position %d, unfused: ran %v, %v", pos, ran, err)
				}
			}
			fused := func(o normRoPEOperands, x *runtime.Tensor, pos int) {
				t.Helper()
				if ran, err := gb.ProjectRoPEStoreKV(op(o, x, pos)); err != nil || !ran {
					t.Fatalf("position %d: ran %v, %v", pos, ran, err)
				}
			}
			for _, pos := range []int{0, 1, 1000, C - 1, 1000} {
				xv := randBF16(rng, c.D, 1)
				x := gpu(t, runtime.BF16, xv, 1, c.D)
				unfused(x, pos)
				fused(f, x, pos)
				sameOperands(t, fmt.Sprintf("position %d against the unfused launches", pos), f, u)
				if pos != 1000 || c.d != 128 {
					continue
				}
				ref := kernels.QKVRoPE{Q: host(t, runtime.F32, nil, 1, c.H, c.d), K: host(t, runtime.F32, nil, 1, c.KV, c.d),
					V: host(t, runtime.F32, nil, 1, c.KV, c.d), X: host(t, runtime.F32, xv, 1, c.D),
					WQ: host(t, runtime.BF16, wqv, Nq, c.D), WK: host(t, runtime.BF16, wkv, Nkv, c.D), WV: host(t, runtime.BF16, wvv, Nkv, c.D),
					KCache: host(t, runtime.F32, nil, pos+1, c.KV, c.d), VCache: host(t, runtime.F32, nil, pos+1, c.KV, c.d), Pos: pos, InvFreq: inv,
					QNorm: host(t, runtime.F32, nq, c.d), KNorm: host(t, runtime.F32, nk, c.d), Eps: eps}
				if err := kernels.ProjectRoPEStoreKVRef(cb, ref); err != nil {
					t.Fatal(err)
				}
				compare(t, "q against the CPU", read(t, f.q), ref.Q.F32(), 3e-2, 3e-2)
				compare(t, "k against the CPU", read(t, f.k), ref.K.F32(), 3e-2, 3e-2)
				compare(t, "v against the CPU", read(t, f.v), ref.V.F32(), 1e-2, 1e-2)
			}
			// Captured once at position 3, replayed at others: the position
			// comes from the step buffer, the counters are zero again after
			// each replay.
			x := gpu(t, runtime.BF16, randBF16(rng, c.D, 1), 1, c.D)
			g, e := mk(), mk() // g replays the graph, e runs eagerly
			graph, err := gb.CaptureStep(func() error {
				_, err := gb.ProjectRoPEStoreKV(op(g, x, 3))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			defer graph.Close()
			for _, pos := range []int{100, 7, C - 1, 100} {
				if err := gb.WriteBytes(x, bf16Bytes(randBF16(rng, c.D, 1))); err != nil {
					t.Fatal(err)
				}
				if err := gb.SetStep([]int32{0}, pos); err != nil {
					t.Fatal(err)
				}
				if err := graph.Replay(); err != nil {
					t.Fatal(err)
				}
				fused(e, x, pos)
				sameOperands(t, fmt.Sprintf("replay at %d", pos), g, e)
			}
		})
	}
	t.Run("declines", func(t *testing.T) {
		const H, KV, D = 4, 2, 64
		args := func(d int, bias bool) kernels.QKVRoPE {
			inv, err := kernels.RopeInvFreq(d, 1e6, kernels.RopeScaling{})
			if err != nil {
				t.Fatal(err)
			}
			a := kernels.QKVRoPE{Q: poisoned(t, runtime.BF16, 1, H, d), K: poisoned(t, runtime.BF16, 1, KV, d), V: poisoned(t, runtime.BF16, 1, KV, d),
				X: gpu(t, runtime.BF16, randBF16(rng, D, 1), 1, D), WQ: gpu(t, runtime.BF16, randBF16(rng, H*d*D, 0.1), H*d, D),
				WK: gpu(t, runtime.BF16, randBF16(rng, KV*d*D, 0.1), KV*d, D), WV: gpu(t, runtime.BF16, randBF16(rng, KV*d*D, 0.1), KV*d, D),
				KCache: poisoned(t, runtime.BF16, 8, KV, d), VCache: poisoned(t, runtime.BF16, 8, KV, d), Pos: 3, InvFreq: inv,
				QNorm: gpu(t, runtime.BF16, randBF16(rng, d, 1), d), KNorm: gpu(t, runtime.BF16, randBF16(rng, d, 1), d), Eps: eps}
			if bias {
				a.BQ = gpu(t, runtime.BF16, randBF16(rng, H*d, 1), H*d)
			}
			return a
		}
		for _, c := range []struct {
			what string
			on   bool
			d    int
			bias bool
		}{{"switched off", false, 64, false}, {"a q bias", true, 64, true}, {"width 8", true, 8, false}} {
			gb.FuseQKNorm = c.on
			a := args(c.d, c.bias)
			ran, err := gb.ProjectRoPEStoreKV(a)
			gb.FuseQKNorm = true
			if ran || err != nil {
				t.Errorf("%s: ran %v, %v; want a decline", c.what, ran, err)
			}
			for _, x := range []*runtime.Tensor{a.Q, a.K, a.V, a.KCache, a.VCache} {
				for _, v := range read(t, x) {
					if !math.IsNaN(float64(v)) {
						t.Fatalf("%s: a declined call wrote its outputs", c.what)
					}
				}
			}
		}
	})
}
