package host

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkHostAttention times one decode token's attention over a host
// cache of Llama-3-8B's heads (32 query heads, 8 KV heads of 128) at
// contexts 512 and 4096, reporting the caches' GB/s.
func BenchmarkHostAttention(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	const H, KV, d = 32, 8, 128
	for _, threads := range []int{1, 2} {
		for _, ctx := range []int{512, 4096} {
			b.Run(fmt.Sprintf("threads%d/ctx%d", threads, ctx), func(b *testing.B) {
				e, err := NewEngine(Options{Threads: threads})
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				q, out := randF32(r, H*d), make([]float32, H*d)
				kc, vc := randF32(r, ctx*KV*d), randF32(r, ctx*KV*d)
				b.ResetTimer()
				for b.Loop() {
					if err := e.Attention(out, q, kc, vc, 1, ctx-1, H, KV, d, 0); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(2*ctx*KV*d*4)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}
