//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestMatMulAddNormGPU: the accumulating GEMV with the RMSNorm done by its
// last block (MatMulAddNorm, gemv_persist_f32acc_norm) leaves the residual
// y and the normalised x bit for bit as gemv_persist_f32acc then
// rmsnorm_f32in_bf16 (MatMulAdd then RMSNorm) do, on shapes where the
// norm's block has one float4 a thread (N 4096), fewer threads (1024) and
// some threads two (5000), over K 512, 4096 and 14336; launch after launch
// on the same y (the counter must come back to 0, or no block would find
// itself last and x would stay poisoned), alternating shapes (grids); and
// replaying a captured graph of two such launches several times. x also
// matches the CPU's RMSNorm of y. Off (NormTail false), for several tokens,
// a width the norm kernel does not take or an out overlapping y, the op
// declines and writes nothing.
func TestMatMulAddNormGPU(t *testing.T) {
	needGPU(t)
	tail := gb.NormTail
	gb.NormTail = true
	defer func() { gb.NormTail = tail }()
	rng := newRNG(t)
	const eps = 1e-5

	type operands struct {
		N, K   int
		x, w   *runtime.Tensor
		nw     *runtime.Tensor
		y0     []float32
		yu, yf *runtime.Tensor // the unfused and the fused path's residual
	}
	mk := func(N, K int) *operands {
		o := &operands{N: N, K: K}
		o.x = gpu(t, runtime.BF16, randBF16(rng, K, 1), 1, K)
		o.w = gpu(t, runtime.BF16, randBF16(rng, N*K, float32(1/math.Sqrt(float64(K)))), N, K)
		o.nw = gpu(t, runtime.BF16, randBF16(rng, N, 1), N)
		o.y0 = randBF16(rng, N, 2)
		o.yu, o.yf = gpu(t, runtime.F32, o.y0, 1, N), gpu(t, runtime.F32, o.y0, 1, N)
		return o
	}
	// unfused runs MatMulAdd then RMSNorm on o.yu and returns x.
	unfused := func(o *operands) []float32 {
		t.Helper()
		if err := gb.MatMulAdd(o.yu, o.x, o.w); err != nil {
			t.Fatal(err)
		}
		h := poisoned(t, runtime.BF16, 1, o.N)
		if err := gb.RMSNorm(h, o.yu, o.nw, eps); err != nil {
			t.Fatal(err)
		}
		return read(t, h)
	}
	// same checks that both paths' residuals and xs are equal bit for bit.
	same := func(what string, o *operands, xu []float32, xf *runtime.Tensor) {
		t.Helper()
		if yu, yf := read(t, o.yu), read(t, o.yf); !slices.Equal(yu, yf) {
			t.Errorf("%s: y differs from gemv_persist_f32acc's (max |diff| %g)", what, maxDiff(yu, yf))
		}
		if got := read(t, xf); !slices.Equal(got, xu) {
			t.Errorf("%s: x differs from rmsnorm_f32in_bf16's (max |diff| %g; NaN: not written)", what, maxDiff(got, xu))
		}
	}

	shapes := []struct{ N, K int }{{4096, 4096}, {4096, 14336}, {1024, 512}, {5000, 4096}, {1024, 14336}, {5000, 512}}
	ops := make([]*operands, len(shapes))
	for i, s := range shapes {
		ops[i] = mk(s.N, s.K)
	}
	for round := range 3 { // every shape once a round: the counter is shared by all launches
		for _, o := range ops {
			name := fmt.Sprintf("N%d K%d launch %d", o.N, o.K, round+1)
			xu := unfused(o)
			xf := poisoned(t, runtime.BF16, 1, o.N)
			if ran, err := gb.MatMulAddNorm(o.yf, o.x, o.w, xf, o.nw, eps); err != nil || !ran {
				t.Fatalf("%s: ran %v, %v", name, ran, err)
			}
			same(name, o, xu, xf)
			if round == 0 {
				ref := host(t, runtime.F32, nil, 1, o.N)
				if err := cb.RMSNorm(ref, host(t, runtime.F32, read(t, o.yf), 1, o.N), host(t, runtime.F32, read(t, o.nw), o.N), eps); err != nil {
					t.Fatal(err)
				}
				compare(t, name+": x against the CPU's RMSNorm of y", read(t, xf), ref.F32(), 1e-2, 1e-2)
			}
		}
	}

	t.Run("graph", func(t *testing.T) {
		// o_proj then down_proj of a layer: two launches into one residual,
		// each writing its x, captured once and replayed.
		a, d := mk(4096, 4096), mk(4096, 14336)
		d.yu, d.yf = a.yu, a.yf
		xa, xd := poisoned(t, runtime.BF16, 1, 4096), poisoned(t, runtime.BF16, 1, 4096)
		g, err := gb.CaptureStep(func() error {
			if _, err := gb.MatMulAddNorm(a.yf, a.x, a.w, xa, a.nw, eps); err != nil {
				return err
			}
			_, err := gb.MatMulAddNorm(d.yf, d.x, d.w, xd, d.nw, eps)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		for i := range 4 {
			if err := gb.Fill16(xa, 0x7fc0); err != nil {
				t.Fatal(err)
			}
			if err := gb.Fill16(xd, 0x7fc0); err != nil {
				t.Fatal(err)
			}
			if err := g.Replay(); err != nil {
				t.Fatal(err)
			}
			xua := unfused(a)
			xud := unfused(d)
			if got := read(t, xa); !slices.Equal(got, xua) {
				t.Errorf("replay %d: the first launch's x differs from rmsnorm_f32in_bf16's (max |diff| %g)", i+1, maxDiff(got, xua))
			}
			same(fmt.Sprintf("replay %d", i+1), d, xud, xd)
		}
	})

	t.Run("declines", func(t *testing.T) {
		o := mk(1024, 512)
		xf := poisoned(t, runtime.BF16, 1, o.N)
		decline := func(what string, y, x, w, out, nw *runtime.Tensor) {
			t.Helper()
			if ran, err := gb.MatMulAddNorm(y, x, w, out, nw, eps); ran || err != nil {
				t.Errorf("%s: ran %v, %v; want a decline", what, ran, err)
			}
		}
		gb.NormTail = false
		decline("NormTail off", o.yf, o.x, o.w, xf, o.nw)
		gb.NormTail = true
		x2 := gpu(t, runtime.BF16, randBF16(rng, 2*o.K, 1), 2, o.K)
		decline("two tokens", gpu(t, runtime.F32, nil, 2, o.N), x2, o.w, poisoned(t, runtime.BF16, 2, o.N), o.nw)
		const odd = 1022 // not a multiple of 4: rmsnorm_f32in_bf16 does not take it either
		decline("N = 1022", gpu(t, runtime.F32, nil, 1, odd), o.x, gpu(t, runtime.BF16, nil, odd, o.K), poisoned(t, runtime.BF16, 1, odd),
			gpu(t, runtime.BF16, nil, odd))
		yb := gpu(t, runtime.F32, nil, 1, 2*o.N) // y and, half way into it, out
		yh, err := runtime.TensorOn(yb.Buffer(), yb.Offset(), runtime.F32, runtime.Shape{1, o.N})
		if err != nil {
			t.Fatal(err)
		}
		ov, err := runtime.TensorOn(yb.Buffer(), yb.Offset()+int64(2*o.N), runtime.BF16, runtime.Shape{1, o.N})
		if err != nil {
			t.Fatal(err)
		}
		decline("out overlapping y", yh, o.x, o.w, ov, o.nw)
		if v := read(t, xf); !math.IsNaN(float64(v[0])) {
			t.Error("a declined call wrote its output")
		}
	})
}

// maxDiff is the largest |a[i] − b[i]| (NaN where either is NaN).
func maxDiff(a, b []float32) float64 {
	m := 0.0
	for i := range min(len(a), len(b)) {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if math.IsNaN(d) {
			return d
		}
		m = max(m, d)
	}
	return m
}
