package host

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// Llama3Shapes are the GEMVs of a Llama-3-8B decode step, [N, K].
var llama3Shapes = []struct {
	name string
	n, k int
}{
	{"qkv_4096x6144", 6144, 4096},
	{"o_4096x4096", 4096, 4096},
	{"gateup_4096x28672", 28672, 4096},
	{"down_14336x4096", 4096, 14336},
	{"lmhead_4096x128256", 128256, 4096},
}

var (
	benchReadOnce sync.Once
	benchReadGBs  float64
)

// readCeiling measures the read bandwidth once per test binary (512 MiB).
func readCeiling(b *testing.B) float64 {
	benchReadOnce.Do(func() {
		e, err := NewEngine(Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		benchReadGBs, _ = e.ReadBandwidth(512<<20, 5)
	})
	return benchReadGBs
}

// BenchmarkHostRead is the STREAM-like read kernel over 512 MiB on all
// cores.
func BenchmarkHostRead(b *testing.B) {
	e, err := NewEngine(Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	buf := make([]float32, (512<<20)/4)
	for i := range buf {
		buf[i] = 1
	}
	e.ReadSum(buf)
	b.SetBytes(int64(len(buf) * 4))
	for b.Loop() {
		e.ReadSum(buf)
	}
	b.ReportMetric(float64(len(buf)*4)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

// BenchmarkHostGEMV runs the decode GEMVs of Llama-3-8B in BF16 and FP8
// (per channel and 128×128 blocks) at 1 and 4 tokens on all cores at the
// best level, reporting weight GB/s and its share of the read ceiling.
func BenchmarkHostGEMV(b *testing.B) {
	ceil := readCeiling(b)
	e, err := NewEngine(Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	r := rand.New(rand.NewPCG(7, 8))
	for _, s := range llama3Shapes {
		for _, kind := range []string{"bf16", "fp8-channel", "fp8-block128"} {
			var bf kernels.Mat
			var q kernels.QMat
			var bytes int
			if kind == "bf16" {
				bf = kernels.Mat{DType: runtime.BF16, Rows: s.n, Cols: s.k, Half: make([]uint16, s.n*s.k)}
				for i := range bf.Half {
					bf.Half[i] = runtime.F32ToBF16(r.Float32() - 0.5)
				}
				bytes = 2 * s.n * s.k
			} else {
				block := 0
				if kind == "fp8-block128" {
					block = 128
				}
				q = kernels.QMat{DType: runtime.F8E4M3, Rows: s.n, Cols: s.k, Q: make([]uint8, s.n*s.k), Layout: kernels.FP8Layout{Block: block}}
				for i := range q.Q {
					q.Q[i] = uint8(r.IntN(256)) &^ 0x78 // finite codes
				}
				q.Scale = make([]float32, q.Layout.ScaleShape(s.n, s.k).NumElements())
				for i := range q.Scale {
					q.Scale[i] = 0.01
				}
				bytes = s.n * s.k
			}
			for _, T := range []int{1, 4} {
				b.Run(fmt.Sprintf("%s/%s/T%d", s.name, kind, T), func(b *testing.B) {
					x := randF32(r, T*s.k)
					out := make([]float32, T*s.n)
					b.SetBytes(int64(bytes))
					for b.Loop() {
						if kind == "bf16" {
							err = e.MatMul(out, x, T, bf)
						} else {
							err = e.MatMulQ(out, x, T, q)
						}
						if err != nil {
							b.Fatal(err)
						}
					}
					gbs := float64(bytes) * float64(b.N) / b.Elapsed().Seconds() / 1e9
					b.ReportMetric(gbs, "GB/s")
					b.ReportMetric(100*gbs/ceil, "%read")
				})
			}
		}
	}
}
