package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

var sinkF float32

func dot1x4bf(x []float32, w0, w1, w2, w3 []uint16) (s0, s1, s2, s3 float32) {
	n := len(x)
	w0, w1, w2, w3 = w0[:n], w1[:n], w2[:n], w3[:n]
	for k, a := range x {
		s0 += a * math.Float32frombits(uint32(w0[k])<<16)
		s1 += a * math.Float32frombits(uint32(w1[k])<<16)
		s2 += a * math.Float32frombits(uint32(w2[k])<<16)
		s3 += a * math.Float32frombits(uint32(w3[k])<<16)
	}
	return
}

func BenchmarkMicroGemv(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	const k = 4096
	x := randF32(r, k)
	h := make([]uint16, 4*k)
	for i := range h {
		h[i] = runtime.F32ToBF16(r.Float32()*2 - 1)
	}
	buf := make([]float32, 4*k)
	for range 3 {
		b.Run("fused", func(b *testing.B) {
			for b.Loop() {
				a, c, d, e := dot1x4bf(x, h[:k], h[k:2*k], h[2*k:3*k], h[3*k:])
				sinkF += a + c + d + e
			}
			b.ReportMetric(4*k*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
		})
		b.Run("widen_all", func(b *testing.B) {
			for b.Loop() {
				widenBF16(buf, h)
				a, c, d, e := dot1x4(x, buf[:k], buf[k:2*k], buf[2*k:3*k], buf[3*k:])
				sinkF += a + c + d + e
			}
			b.ReportMetric(4*k*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
		})
		b.Run("widen_chunk512", func(b *testing.B) {
			const kc = 512
			for b.Loop() {
				var a, c, d, e float32
				for k0 := 0; k0 < k; k0 += kc {
					for r := range 4 {
						widenBF16(buf[r*kc:(r+1)*kc], h[r*k+k0:r*k+k0+kc])
					}
					a1, c1, d1, e1 := dot1x4(x[k0:k0+kc], buf[:kc], buf[kc:2*kc], buf[2*kc:3*kc], buf[3*kc:4*kc])
					a, c, d, e = a+a1, c+c1, d+d1, e+e1
				}
				sinkF += a + c + d + e
			}
			b.ReportMetric(4*k*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
		})
	}
}
