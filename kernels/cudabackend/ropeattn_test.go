//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestAttendRoPEGPU: attn_decode_rope_* (AttendRoPE, FT_ROPE_ATTN) writes
// the attention output bit for bit as RoPEStoreKV (rope_store_bf16) then
// AttentionWindow (the transposed decode kernel) do, and leaves both
// caches bit for bit as they leave them, over GQA ratios 4 (Llama 3 8B),
// 2 and 7, the default variant s3w4h1t and its FAST twin s3w4h1tf, the
// default 128-position split chunk and 16 (up to 32 splits, the new
// position in a middle split with empty ones after it), sliding windows
// 0 and 100, positions 0 .. the cache's last row in increasing order
// (each step's row stored by the one op); the llama3 frequency table; q and
// the new key keep their values. Declines (switched off, head width 64,
// 8 query heads a KV head without ForceMMADecode, another decode variant)
// enqueue nothing; a position past the cache is an error. A few seconds.
func TestAttendRoPEGPU(t *testing.T) {
	needGPU(t)
	saved, savedV, savedChunk := gb.RoPEAttn, gb.DecodePipeVariant, gb.DecodePipeChunk
	defer func() { gb.RoPEAttn, gb.DecodePipeVariant, gb.DecodePipeChunk = saved, savedV, savedChunk }()
	gb.RoPEAttn = true
	rng := newRNG(t)
	const C, d = 2048, 128
	inv, err := kernels.RopeInvFreq(d, 500000, kernels.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192})
	if err != nil {
		t.Fatal(err)
	}
	positions := []int{0, 1, 15, 16, 17, 127, 128, 129, 300, 700, 1000, 1500, C - 1}
	for _, c := range []struct{ H, K int }{{32, 8}, {16, 8}, {28, 4}} {
		for _, variant := range []string{"", "s3w4h1tf"} {
			for _, chunk := range []int{0, 16} {
				for _, window := range []int{0, 100} {
					if window > 0 && (c.H != 32 || chunk != 0) {
						continue
					}
					name := fmt.Sprintf("H%d_K%d_%s_chunk%d_window%d", c.H, c.K, orDefault(variant, "default"), chunk, window)
					t.Run(name, func(t *testing.T) {
						gb.DecodePipeVariant, gb.DecodePipeChunk = variant, chunk
						H, K := c.H, c.K
						kc0, vc0 := randBF16(rng, C*K*d, 1), randBF16(rng, C*K*d, 1)
						uk, uv := gpu(t, runtime.BF16, kc0, C, K, d), gpu(t, runtime.BF16, vc0, C, K, d) // rope_store_bf16 + attention
						fk, fv := gpu(t, runtime.BF16, kc0, C, K, d), gpu(t, runtime.BF16, vc0, C, K, d) // the fused op
						uo, fo := poisoned(t, runtime.BF16, 1, H, d), poisoned(t, runtime.BF16, 1, H, d)
						n0 := gb.RoPEAttentions()
						for _, pos := range positions {
							qv, kv, vv := randBF16(rng, H*d, 2), randBF16(rng, K*d, 2), randBF16(rng, K*d, 1)
							uq, ukx, uvx := gpu(t, runtime.BF16, qv, 1, H, d), gpu(t, runtime.BF16, kv, 1, K, d), gpu(t, runtime.BF16, vv, 1, K, d)
							fq, fkx, fvx := gpu(t, runtime.BF16, qv, 1, H, d), gpu(t, runtime.BF16, kv, 1, K, d), gpu(t, runtime.BF16, vv, 1, K, d)
							if err := gb.RoPEStoreKV(uq, ukx, uvx, uk, uv, pos, inv); err != nil {
								t.Fatal(err)
							}
							if err := gb.AttentionWindow(uo, uq, uk, uv, pos, window); err != nil {
								t.Fatal(err)
							}
							ran, err := gb.AttendRoPE(kernels.RoPEAttention{Out: fo, Q: fq, K: fkx, V: fvx, KCache: fk, VCache: fv, Pos: pos, Window: window, InvFreq: inv})
							if err != nil || !ran {
								t.Fatalf("position %d: ran %v, %v; want the fused kernel", pos, ran, err)
							}
							g, w := read(t, fo), read(t, uo)
							if i := sameBits(g, w); i >= 0 {
								t.Fatalf("position %d: out[%d] (head %d) = %v, rope_store_bf16 + attention %v", pos, i, i/d, g[i], w[i])
							}
							// q and the new key as they came; v never changes.
							for _, p := range []struct {
								n    string
								x    *runtime.Tensor
								want []float32
							}{{"q", fq, qv}, {"k", fkx, kv}, {"v", fvx, vv}} {
								if got := read(t, p.x); !slices.Equal(got, p.want) {
									t.Fatalf("position %d: the fused op changed %s", pos, p.n)
								}
							}
						}
						for _, p := range []struct {
							n        string
							got, unf *runtime.Tensor
						}{{"k cache", fk, uk}, {"v cache", fv, uv}} {
							g, w := read(t, p.got), read(t, p.unf)
							if i := sameBits(g, w); i >= 0 {
								t.Fatalf("%s element %d (row %d) = %v, rope_store_bf16's %v", p.n, i, i/(K*d), g[i], w[i])
							}
						}
						if n := gb.RoPEAttentions() - n0; n != int64(len(positions)) {
							t.Errorf("%d fused launches counted, want %d", n, len(positions))
						}
					})
				}
			}
		}
	}
	gb.DecodePipeVariant, gb.DecodePipeChunk = savedV, savedChunk

	t.Run("declines", func(t *testing.T) {
		args := func(H, K, d, C, pos int) kernels.RoPEAttention {
			inv := make([]float32, d/2)
			for i := range inv {
				inv[i] = float32(math.Pow(10000, -float64(2*i)/float64(d)))
			}
			return kernels.RoPEAttention{Out: poisoned(t, runtime.BF16, 1, H, d), Q: poisoned(t, runtime.BF16, 1, H, d),
				K: poisoned(t, runtime.BF16, 1, K, d), V: poisoned(t, runtime.BF16, 1, K, d),
				KCache: poisoned(t, runtime.BF16, C, K, d), VCache: poisoned(t, runtime.BF16, C, K, d), Pos: pos, InvFreq: inv}
		}
		declines := func(what string, a kernels.RoPEAttention) {
			t.Helper()
			n0 := gb.RoPEAttentions()
			if ran, err := gb.AttendRoPE(a); ran || err != nil {
				t.Errorf("%s: ran %v, %v; want a decline", what, ran, err)
			}
			if gb.RoPEAttentions() != n0 {
				t.Errorf("%s: a decline counted a launch", what)
			}
			for _, v := range read(t, a.Out) {
				if !math.IsNaN(float64(v)) {
					t.Fatalf("%s: a declined call wrote its output", what)
				}
			}
		}
		gb.RoPEAttn = false
		declines("switched off", args(32, 8, 128, 64, 5))
		gb.RoPEAttn = true
		declines("head width 64", args(16, 4, 64, 64, 5))
		if !gb.ForceMMADecode {
			declines("8 query heads a KV head", args(32, 4, 128, 64, 5))
		}
		gb.DecodePipeVariant = "s3w4h1r"
		declines("FT_DECODE_VARIANT=s3w4h1r", args(32, 8, 128, 64, 5))
		gb.DecodePipeVariant = savedV
		if _, err := gb.AttendRoPE(args(32, 8, 128, 64, 64)); err == nil || !strings.Contains(err.Error(), "position 64 outside the cache's 64 rows") {
			t.Errorf("position past the cache: error %v", err)
		}
		a := args(32, 8, 128, 64, 5)
		a.K = poisoned(t, runtime.BF16, 1, 4, 128)
		if _, err := gb.AttendRoPE(a); err == nil {
			t.Error("k [1,4,128] against caches [64,8,128]: no error")
		}
	})
}

// orDefault is s, or def when s is empty.
func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
