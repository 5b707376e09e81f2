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

// TestNormRoPEAttendGPU: attn_decode_pipe_d128_s3w4h1tpn_bf16 (the q/k
// norms, RoPE and KV store inside the decode attention) leaves in the
// caches and the output what NormRoPEStoreKV then AttentionWindow (the
// s3w4h1tp kernel) leave: the value row bit for bit, the key row and the
// attention within bf16 rounding (the norms' sums are added in another
// order); every other cache row untouched. Shapes of 2, 3 and 4 query
// heads a KV head at head width 128, positions at the edges of the
// 16-position groups and 256-position splits and the cache's last row,
// sliding windows; the CPU reference at one position. A graph captured
// at one position replays at others with the eager op's bits. Declines
// (several tokens, head width 64, 8 query heads a KV head, the switch,
// another decode variant) enqueue nothing; bad operands are errors.
func TestNormRoPEAttendGPU(t *testing.T) {
	needGPU(t)
	defer func(n int) { gb.QKNormRoPETokens = n }(gb.QKNormRoPETokens)
	gb.QKNormRoPETokens = 1
	rng := newRNG(t)
	const C, d, eps = 2048, 128, 1e-6
	inv, err := kernels.RopeInvFreq(d, 1e6, kernels.RopeScaling{})
	if err != nil {
		t.Fatal(err)
	}
	type ops struct{ out, q, k, v, kc, vc *runtime.Tensor }
	for _, c := range []struct{ H, KV int }{{32, 8}, {16, 8}, {24, 8}} {
		t.Run(fmt.Sprintf("H%d_KV%d", c.H, c.KV), func(t *testing.T) {
			nq, nkv := c.H*d, c.KV*d
			wqv, wkv := randBF16(rng, d, 1), randBF16(rng, d, 1)
			wq, wk := gpu(t, runtime.BF16, wqv, d), gpu(t, runtime.BF16, wkv, d)
			kc0, vc0 := randBF16(rng, C*nkv, 1), randBF16(rng, C*nkv, 1)
			mk := func(q, k, v []float32) ops {
				return ops{out: poisoned(t, runtime.BF16, 1, c.H, d), q: gpu(t, runtime.BF16, q, 1, c.H, d), k: gpu(t, runtime.BF16, k, 1, c.KV, d),
					v: gpu(t, runtime.BF16, v, 1, c.KV, d), kc: gpu(t, runtime.BF16, kc0, C, c.KV, d), vc: gpu(t, runtime.BF16, vc0, C, c.KV, d)}
			}
			args := func(o ops, pos int) kernels.QKNormRoPE {
				return kernels.QKNormRoPE{Q: o.q, K: o.k, V: o.v, QNorm: wq, KNorm: wk, Eps: eps, KCache: o.kc, VCache: o.vc, Pos: pos, InvFreq: inv}
			}
			separate := func(o ops, pos, window int) {
				t.Helper()
				if ran, err := gb.NormRoPEStoreKV(args(o, pos)); err != nil || !ran {
					t.Fatalf("NormRoPEStoreKV at %d: ran %v, %v", pos, ran, err)
				}
				if err := gb.AttentionWindow(o.out, o.q, o.kc, o.vc, pos, window); err != nil {
					t.Fatal(err)
				}
			}
			fused := func(o ops, pos, window int) {
				t.Helper()
				if ran, err := gb.NormRoPEAttend(o.out, args(o, pos), window); err != nil || !ran {
					t.Fatalf("NormRoPEAttend at %d: ran %v, %v", pos, ran, err)
				}
			}
			for _, p := range []struct{ pos, window int }{{0, 0}, {1, 0}, {15, 0}, {16, 0}, {17, 0}, {255, 0}, {256, 0}, {257, 0},
				{300, 0}, {300, 16}, {1000, 0}, {1000, 100}, {C - 1, 0}} {
				what := fmt.Sprintf("position %d window %d", p.pos, p.window)
				q, k, v := randBF16(rng, nq, 4), randBF16(rng, nkv, 4), randBF16(rng, nkv, 1)
				s, f := mk(q, k, v), mk(q, k, v)
				separate(s, p.pos, p.window)
				fused(f, p.pos, p.window)
				if i := sameBits(read(t, f.vc), read(t, s.vc)); i >= 0 {
					t.Fatalf("%s: v cache differs at %d", what, i)
				}
				gk, sk := read(t, f.kc), read(t, s.kc)
				row := p.pos * nkv
				if i := sameBits(append(gk[:row:row], gk[row+nkv:]...), append(sk[:row:row], sk[row+nkv:]...)); i >= 0 {
					t.Fatalf("%s: k cache differs outside row %d (element %d of the others)", what, p.pos, i)
				}
				compare(t, what+": new k row", gk[row:row+nkv], sk[row:row+nkv], 2e-2, 1e-2)
				compare(t, what+": attention", read(t, f.out), read(t, s.out), 1e-2, 2e-2)
				if p.pos != 300 || p.window != 0 {
					continue
				}
				out := host(t, runtime.F32, nil, 1, c.H, d)
				ref := kernels.QKNormRoPE{Q: host(t, runtime.F32, q, 1, c.H, d), K: host(t, runtime.F32, k, 1, c.KV, d),
					V: host(t, runtime.F32, v, 1, c.KV, d), QNorm: host(t, runtime.F32, wqv, d), KNorm: host(t, runtime.F32, wkv, d), Eps: eps,
					KCache: host(t, runtime.F32, kc0, C, c.KV, d), VCache: host(t, runtime.F32, vc0, C, c.KV, d), Pos: p.pos, InvFreq: inv}
				if err := kernels.NormRoPEAttendRef(cb, out, ref, 0); err != nil {
					t.Fatal(err)
				}
				compare(t, "attention against the CPU", read(t, f.out), out.F32(), 3e-2, 3e-2)
				compare(t, "k row against the CPU", gk[row:row+nkv], ref.KCache.F32()[row:row+nkv], 2e-2, 2e-2)
			}
			// Captured once at position 3, replayed at others: the position
			// comes from the step buffer.
			q, k, v := randBF16(rng, nq, 4), randBF16(rng, nkv, 4), randBF16(rng, nkv, 1)
			g, e := mk(q, k, v), mk(q, k, v) // g replays the graph, e runs eagerly
			graph, err := gb.CaptureStep(func() error {
				_, err := gb.NormRoPEAttend(g.out, args(g, 3), 0)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			defer graph.Close()
			for _, pos := range []int{100, 7, 700, C - 1} {
				q, k, v := randBF16(rng, nq, 4), randBF16(rng, nkv, 4), randBF16(rng, nkv, 1)
				for _, o := range []ops{g, e} {
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
				fused(e, pos, 0)
				for _, x := range []struct {
					n    string
					g, e *runtime.Tensor
				}{{"out", g.out, e.out}, {"k cache", g.kc, e.kc}, {"v cache", g.vc, e.vc}} {
					if i := sameBits(read(t, x.g), read(t, x.e)); i >= 0 {
						t.Fatalf("replay at %d: %s differs from the eager op at %d", pos, x.n, i)
					}
				}
			}
		})
	}
	t.Run("declines", func(t *testing.T) {
		args := func(T, H, KV, d int) (*runtime.Tensor, kernels.QKNormRoPE) {
			f, err := kernels.RopeInvFreq(d, 1e6, kernels.RopeScaling{})
			if err != nil {
				t.Fatal(err)
			}
			return poisoned(t, runtime.BF16, T, H, d), kernels.QKNormRoPE{Q: poisoned(t, runtime.BF16, T, H, d), K: poisoned(t, runtime.BF16, T, KV, d),
				V: poisoned(t, runtime.BF16, T, KV, d), QNorm: gpu(t, runtime.BF16, randBF16(rng, d, 1), d), KNorm: gpu(t, runtime.BF16, randBF16(rng, d, 1), d),
				Eps: eps, KCache: poisoned(t, runtime.BF16, 64, KV, d), VCache: poisoned(t, runtime.BF16, 64, KV, d), Pos: 3, InvFreq: f}
		}
		untouched := func(what string, out *runtime.Tensor, a kernels.QKNormRoPE) {
			t.Helper()
			for _, x := range []*runtime.Tensor{out, a.Q, a.K, a.V, a.KCache, a.VCache} {
				for _, v := range read(t, x) {
					if !math.IsNaN(float64(v)) {
						t.Fatalf("%s: a declined call wrote its outputs", what)
					}
				}
			}
		}
		for _, c := range []struct {
			what        string
			T, H, KV, d int
			off         bool
			variant     string
		}{
			{"2 tokens", 2, 32, 8, 128, false, ""},
			{"head width 64", 1, 32, 8, 64, false, ""},
			{"8 query heads a KV head", 1, 64, 8, 128, false, ""},
			{"FT_QKNORM_ATTN=0", 1, 32, 8, 128, true, ""},
			{"FT_DECODE_VARIANT=s3w4h1t", 1, 32, 8, 128, false, "s3w4h1t"},
		} {
			gb.NoQKNormAttention, gb.DecodePipeVariant = c.off, c.variant
			out, a := args(c.T, c.H, c.KV, c.d)
			ran, err := gb.NormRoPEAttend(out, a, 0)
			gb.NoQKNormAttention, gb.DecodePipeVariant = false, ""
			if ran || err != nil {
				t.Errorf("%s: ran %v, %v; want a decline", c.what, ran, err)
			}
			untouched(c.what, out, a)
		}
		out, a := args(1, 32, 8, 128)
		if _, err := gb.NormRoPEAttend(out, a, -1); err == nil || !strings.Contains(err.Error(), "sliding window -1 is negative") {
			t.Errorf("window -1: error %v", err)
		}
		bad, _ := args(1, 16, 8, 128)
		if _, err := gb.NormRoPEAttend(bad, a, 0); err == nil || !strings.Contains(err.Error(), "out [1 16 128], want q's shape [1 32 128]") {
			t.Errorf("out of the wrong shape: error %v", err)
		}
		a.Pos = 64
		if _, err := gb.NormRoPEAttend(out, a, 0); err == nil || !strings.Contains(err.Error(), "1 tokens at position 64 exceed the cache's 64 rows") {
			t.Errorf("position past the cache: error %v", err)
		}
		untouched("bad operands", out, a)
	})
}
