package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// matmulShapes are named real shapes: x is [m,k], w is [n,k].
var matmulShapes = []struct {
	name    string
	m, k, n int
}{
	{"decode_gemv_8B_q_proj_1x4096x4096", 1, 4096, 4096},
	{"decode_gemv_tiny_1x128x352", 1, 128, 352},
	{"prefill_64x512x512", 64, 512, 512},
	{"prefill_128x1024x1024", 128, 1024, 1024},
}

func BenchmarkMatMul(b *testing.B) {
	for _, dt := range []runtime.DType{runtime.BF16, runtime.F32} {
		for _, s := range matmulShapes {
			b.Run(fmt.Sprintf("%s/%v", s.name, dt), func(b *testing.B) {
				r := rand.New(rand.NewPCG(1, 2))
				w := randMat(r, dt, s.n, s.k)
				x := randF32(r, s.m*s.k)
				out := make([]float32, s.m*s.n)
				b.SetBytes(int64(s.n * s.k * dt.Size()))
				cpu0 := processCPUSeconds()
				for b.Loop() {
					if err := MatMul(out, x, s.m, w); err != nil {
						b.Fatal(err)
					}
				}
				flops := 2 * float64(s.m*s.n*s.k) * float64(b.N)
				reportRates(b, flops, cpu0)
			})
		}
	}
}

// reportRates reports GFLOP/s of wall time and GFLOP per CPU-second (the
// work one core does per second; its ratio to GFLOP/s shows how many cores
// the kernel kept busy).
func reportRates(b *testing.B, flops, cpu0 float64) {
	b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	if cpu := processCPUSeconds() - cpu0; cpu > 0 {
		b.ReportMetric(flops/cpu/1e9, "GFLOP/cpu-s")
	}
}

func BenchmarkBF16ToF32(b *testing.B) {
	const n = 64 << 20
	src := make([]uint16, n)
	for i := range src {
		src[i] = uint16(i*2654435761) & 0x7f7f
	}
	dst := make([]float32, n)
	BF16ToF32(dst, src) // fault the pages in outside the timed region
	b.SetBytes(6 * n)   // 2 bytes read and 4 written per value
	b.ResetTimer()
	for b.Loop() {
		BF16ToF32(dst, src)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/value")
}

func BenchmarkBF16ToF32SingleCore(b *testing.B) {
	const n = 64 << 20
	src := make([]uint16, n)
	dst := make([]float32, n)
	widenBF16(dst, src)
	b.SetBytes(6 * n)
	b.ResetTimer()
	for b.Loop() {
		widenBF16(dst, src)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/value")
}

// BenchmarkSample draws from a Llama-3-sized vocabulary (128256 logits).
func BenchmarkSample(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	logits := randF32(r, 128256)
	for i := range logits {
		logits[i] *= 8
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, p := range []SampleParams{{}, {Temperature: 1}, {Temperature: 0.6, TopP: 0.9}, {Temperature: 0.8, TopK: 40, TopP: 0.95}} {
		b.Run(fmt.Sprintf("T%v_k%d_p%v", p.Temperature, p.TopK, p.TopP), func(b *testing.B) {
			for b.Loop() {
				if _, err := Sample(logits, p, rng); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAttention is one decode step of a Llama-3-8B-shaped layer (32
// query heads, 8 KV heads, d = 128) at context 512, and a 512-token prefill.
func BenchmarkAttention(b *testing.B) {
	const nHeads, nKV, d, capacity = 32, 8, 128, 1024
	r := rand.New(rand.NewPCG(1, 2))
	kc, vc := randF32(r, capacity*nKV*d), randF32(r, capacity*nKV*d)
	for _, c := range []struct {
		name       string
		nTok, pos0 int
	}{{"decode_ctx512_8B", 1, 511}, {"prefill_512_8B", 512, 0}} {
		b.Run(c.name, func(b *testing.B) {
			q := randF32(r, c.nTok*nHeads*d)
			out := make([]float32, len(q))
			scratch := make([]float32, AttentionScratchLen(c.nTok, c.pos0))
			// q·k and p·v over the visible positions, 2 flops each.
			var macs float64
			for t := range c.nTok {
				macs += 2 * float64(nHeads*d*(c.pos0+t+1))
			}
			b.SetBytes(int64(2 * (c.pos0 + c.nTok) * nKV * d * 4))
			cpu0 := processCPUSeconds()
			for b.Loop() {
				if err := Attention(out, q, kc, vc, c.nTok, c.pos0, nHeads, nKV, d, scratch); err != nil {
					b.Fatal(err)
				}
			}
			reportRates(b, 2*macs*float64(b.N), cpu0)
		})
	}
}
