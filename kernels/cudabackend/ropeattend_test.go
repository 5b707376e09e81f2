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

// ropeAttendOperands are one call's tensors on the GPU: out and q [1,H,d],
// k and v [1,KV,d], the caches [C,KV,d].
type ropeAttendOperands struct{ out, q, k, v, kc, vc *runtime.Tensor }

// TestRoPEAttendGPU: the RoPE twins of the decode attention leave in the
// output and both caches bit for bit what rope_store_bf16 then the decode
// attention leave, on Llama-3-8B's heads (32 q, 8 KV, d 128) over caches
// of 512 rows (the s2w8h1tp twin) and 4,096 (s3w4h1tp), at positions on
// and around the 16-row groups and the splits' edges, the first and the
// last row, with and without a sliding window; and the CPU reference's
// values within bf16 rounding. A graph captured at one position replays at
// others as the eager op runs there. Declines (switched off, a variant
// without a twin, 8 query heads per KV head, d 64) enqueue nothing; bad
// operands are errors.
func TestRoPEAttendGPU(t *testing.T) {
	needGPU(t)
	defer func(off bool) { gb.NoRoPEAttend = off }(gb.NoRoPEAttend)
	gb.NoRoPEAttend = false
	rng := newRNG(t)
	const H, KV, d = 32, 8, 128
	inv, err := kernels.RopeInvFreq(d, 500000, kernels.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4,
		OriginalMaxPositions: 8192})
	if err != nil {
		t.Fatal(err)
	}
	for _, C := range []int{512, 4096} {
		t.Run(fmt.Sprintf("C%d", C), func(t *testing.T) {
			kc0, vc0 := randBF16(rng, C*KV*d, 1), randBF16(rng, C*KV*d, 1)
			mk := func(q, k, v []float32) ropeAttendOperands {
				return ropeAttendOperands{out: gpu(t, runtime.BF16, make([]float32, H*d), 1, H, d),
					q: gpu(t, runtime.BF16, q, 1, H, d), k: gpu(t, runtime.BF16, k, 1, KV, d), v: gpu(t, runtime.BF16, v, 1, KV, d),
					kc: gpu(t, runtime.BF16, kc0, C, KV, d), vc: gpu(t, runtime.BF16, vc0, C, KV, d)}
			}
			args := func(o ropeAttendOperands, pos, window int) kernels.RoPEAttention {
				return kernels.RoPEAttention{Out: o.out, Q: o.q, K: o.k, V: o.v, KCache: o.kc, VCache: o.vc, Pos: pos, InvFreq: inv, Window: window}
			}
			unfused := func(o ropeAttendOperands, pos, window int) {
				t.Helper()
				if err := gb.RoPEStoreKV(o.q, o.k, o.v, o.kc, o.vc, pos, inv); err != nil {
					t.Fatal(err)
				}
				if err := gb.AttentionWindow(o.out, o.q, o.kc, o.vc, pos, window); err != nil {
					t.Fatal(err)
				}
			}
			fused := func(o ropeAttendOperands, pos, window int) {
				t.Helper()
				if ran, err := gb.RoPEAttend(args(o, pos, window)); err != nil || !ran {
					t.Fatalf("position %d: ran %v, %v", pos, ran, err)
				}
			}
			same := func(what string, got, want ropeAttendOperands) {
				t.Helper()
				for _, p := range []struct {
					n        string
					got, unf *runtime.Tensor
				}{{"out", got.out, want.out}, {"k cache", got.kc, want.kc}, {"v cache", got.vc, want.vc}} {
					g, w := read(t, p.got), read(t, p.unf)
					if i := sameBits(g, w); i >= 0 {
						t.Fatalf("%s: %s[%d] = %v, want %v", what, p.n, i, g[i], w[i])
					}
				}
			}
			for _, pos := range []int{0, 1, 15, 16, 17, 255, 256, 300, C/2 - 1, C - 2, C - 1} {
				for _, window := range []int{0, 100} {
					q, k, v := randBF16(rng, H*d, 2), randBF16(rng, KV*d, 2), randBF16(rng, KV*d, 1)
					u, f := mk(q, k, v), mk(q, k, v)
					unfused(u, pos, window)
					fused(f, pos, window)
					same(fmt.Sprintf("position %d, window %d, against the unfused launches", pos, window), f, u)
					if pos != 300 || window != 0 {
						continue
					}
					ref := kernels.RoPEAttention{Out: host(t, runtime.F32, make([]float32, H*d), 1, H, d),
						Q: host(t, runtime.F32, q, 1, H, d), K: host(t, runtime.F32, k, 1, KV, d), V: host(t, runtime.F32, v, 1, KV, d),
						KCache: host(t, runtime.F32, kc0, C, KV, d), VCache: host(t, runtime.F32, vc0, C, KV, d), Pos: pos, InvFreq: inv}
					if err := kernels.RoPEAttendRef(cb, ref); err != nil {
						t.Fatal(err)
					}
					compare(t, "out against the CPU", read(t, f.out), ref.Out.F32(), 2e-2, 2e-2)
					compare(t, "k cache against the CPU", read(t, f.kc), ref.KCache.F32(), 2e-2, 2e-2)
					compare(t, "v cache against the CPU", read(t, f.vc), ref.VCache.F32(), 0, 0)
				}
			}
			// Captured once at position 3, replayed at others: the position
			// comes from the step buffer.
			q, k, v := randBF16(rng, H*d, 2), randBF16(rng, KV*d, 2), randBF16(rng, KV*d, 1)
			g, e := mk(q, k, v), mk(q, k, v) // g replays the graph, e runs eagerly
			graph, err := gb.CaptureStep(func() error {
				_, err := gb.RoPEAttend(args(g, 3, 0))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			defer graph.Close()
			for _, pos := range []int{100, 7, C - 1} {
				q, k, v := randBF16(rng, H*d, 2), randBF16(rng, KV*d, 2), randBF16(rng, KV*d, 1)
				for _, o := range []ropeAttendOperands{g, e} {
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
				same(fmt.Sprintf("replay at %d", pos), g, e)
			}
		})
	}
	t.Run("declines", func(t *testing.T) {
		args := func(H, KV, d int) kernels.RoPEAttention {
			f, err := kernels.RopeInvFreq(d, 10000, kernels.RopeScaling{})
			if err != nil {
				t.Fatal(err)
			}
			return kernels.RoPEAttention{Out: poisoned(t, runtime.BF16, 1, H, d), Q: poisoned(t, runtime.BF16, 1, H, d),
				K: poisoned(t, runtime.BF16, 1, KV, d), V: poisoned(t, runtime.BF16, 1, KV, d),
				KCache: poisoned(t, runtime.BF16, 64, KV, d), VCache: poisoned(t, runtime.BF16, 64, KV, d), Pos: 9, InvFreq: f}
		}
		untouched := func(what string, a kernels.RoPEAttention) {
			t.Helper()
			for _, x := range []*runtime.Tensor{a.Out, a.Q, a.K, a.V, a.KCache, a.VCache} {
				for _, v := range read(t, x) {
					if !math.IsNaN(float64(v)) {
						t.Fatalf("%s: a declined call wrote its operands", what)
					}
				}
			}
		}
		for _, c := range []struct {
			what      string
			off       bool
			variant   string
			H, KV, d  int
			wantError string
		}{
			{"switched off", true, "", 32, 8, 128, ""},
			{"variant s3w4h1t (no twin)", false, "s3w4h1t", 32, 8, 128, ""},
			{"8 query heads a KV head", false, "", 32, 4, 128, ""},
			{"head width 64", false, "", 16, 2, 64, ""},
		} {
			gb.NoRoPEAttend, gb.DecodePipeVariant = c.off, c.variant
			a := args(c.H, c.KV, c.d)
			ran, err := gb.RoPEAttend(a)
			gb.NoRoPEAttend, gb.DecodePipeVariant = false, ""
			if ran || err != nil {
				t.Errorf("%s: ran %v, %v; want a decline", c.what, ran, err)
			}
			untouched(c.what, a)
		}
		a := args(32, 8, 128)
		a.Pos = 64
		if _, err := gb.RoPEAttend(a); err == nil || !strings.Contains(err.Error(), "position 64 outside the cache's 64 rows") {
			t.Errorf("position past the cache: error %v", err)
		}
		a = args(32, 8, 128)
		a.Out = poisoned(t, runtime.BF16, 1, 16, 128)
		if _, err := gb.RoPEAttend(a); err == nil || !strings.Contains(err.Error(), "out [1 16 128]") {
			t.Errorf("out of the wrong shape: error %v", err)
		}
		a = args(32, 8, 128)
		a.V = poisoned(t, runtime.F32, 1, 8, 128)
		if _, err := gb.RoPEAttend(a); err == nil || !strings.Contains(err.Error(), "v is F32") {
			t.Errorf("F32 v: error %v", err)
		}
	})
}
