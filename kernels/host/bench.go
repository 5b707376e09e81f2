package host

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// Shape is a named GEMV: a weight of N rows (outputs) and K columns; Key
// is its short name (qkv, o, gateup, down, lmhead).
type Shape struct {
	Key, Name string
	N, K      int
}

// Llama3Shapes are the GEMVs of one Llama-3-8B decode step: fused q/k/v,
// o, fused gate·up, down, LM head.
var Llama3Shapes = []Shape{
	{"qkv", "qkv 4096→6144", 6144, 4096},
	{"o", "o 4096→4096", 4096, 4096},
	{"gateup", "gate·up 4096→28672", 28672, 4096},
	{"down", "down 14336→4096", 4096, 14336},
	{"lmhead", "lm_head 4096→128256", 128256, 4096},
}

// Kinds are the weight formats BenchGEMV takes: "bf16", "fp8-channel" (E4M3
// with per-row scales), "fp8-block128" (E4M3 with 128×128 block scales).
var Kinds = []string{"bf16", "fp8-channel", "fp8-block128"}

// BenchResult is one timed GEMV: its weight bytes, the best time of the
// repetitions and the rate in GB/s (1e9 bytes per second of weights read).
type BenchResult struct {
	Shape  Shape
	Kind   string
	Tokens int
	Bytes  int64
	Best   time.Duration
	GBs    float64
}

// BenchGEMV times y[T,N] = x[T,K]·wᵀ for a random weight of shape s in kind
// (Kinds) on the Engine: one warm-up, then the best of reps calls.
func (e *Engine) BenchGEMV(s Shape, kind string, T, reps int) (BenchResult, error) {
	if s.N <= 0 || s.K <= 0 || T <= 0 || reps <= 0 {
		return BenchResult{}, fmt.Errorf("host.BenchGEMV: shape %dx%d, %d tokens, %d repetitions: want positive sizes", s.N, s.K, T, reps)
	}
	r := rand.New(rand.NewPCG(uint64(s.N), uint64(s.K)))
	x := make([]float32, T*s.K)
	for i := range x {
		x[i] = r.Float32() - 0.5
	}
	out := make([]float32, T*s.N)
	var call func() error
	var bytes int64
	switch kind {
	case "bf16":
		w := kernels.Mat{DType: runtime.BF16, Rows: s.N, Cols: s.K, Half: make([]uint16, s.N*s.K)}
		e.pool.Run(len(w.Half), 1<<20, func(_, lo, hi int) {
			for i := lo; i < hi; i++ {
				w.Half[i] = uint16(0x3c00 + i%509) // small normal values
			}
		})
		bytes = int64(2 * s.N * s.K)
		call = func() error { return e.MatMul(out, x, T, w) }
	case "fp8-channel", "fp8-block128":
		block := 0
		if kind == "fp8-block128" {
			block = 128
		}
		w := kernels.QMat{DType: runtime.F8E4M3, Rows: s.N, Cols: s.K, Q: make([]uint8, s.N*s.K), Layout: kernels.FP8Layout{Block: block}}
		e.pool.Run(len(w.Q), 1<<20, func(_, lo, hi int) {
			for i := lo; i < hi; i++ {
				w.Q[i] = uint8(i*37) &^ 0x40 // finite codes, both signs
			}
		})
		w.Scale = make([]float32, w.Layout.ScaleShape(s.N, s.K).NumElements())
		for i := range w.Scale {
			w.Scale[i] = 0.01
		}
		bytes = int64(s.N * s.K)
		call = func() error { return e.MatMulQ(out, x, T, w) }
	default:
		return BenchResult{}, fmt.Errorf("host.BenchGEMV: kind %q: want one of %v", kind, Kinds)
	}
	if err := call(); err != nil {
		return BenchResult{}, err
	}
	best := time.Duration(1 << 62)
	for range reps {
		t0 := time.Now()
		if err := call(); err != nil {
			return BenchResult{}, err
		}
		best = min(best, time.Since(t0))
	}
	return BenchResult{Shape: s, Kind: kind, Tokens: T, Bytes: bytes, Best: best, GBs: float64(bytes) / best.Seconds() / 1e9}, nil
}
