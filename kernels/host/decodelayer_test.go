package host

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/x448/float16"
)

// tensorOf is a tensor of dt on dev holding vals (rounded to dt).
func tensorOf(t *testing.T, dev runtime.Device, dt runtime.DType, vals []float32, shape ...int) *runtime.Tensor {
	t.Helper()
	x, err := runtime.NewTensor(dev, dt, shape, "test")
	if err != nil {
		t.Fatal(err)
	}
	switch dt {
	case runtime.F32:
		copy(x.F32(), vals)
	case runtime.BF16:
		for i, v := range vals {
			x.U16()[i] = runtime.F32ToBF16(v)
		}
	case runtime.F16:
		for i, v := range vals {
			x.U16()[i] = float16.Fromfloat32(v).Bits()
		}
	}
	return x
}

// TestDecodeLayerEqualsSeparateOps runs one-token layers through
// Backend.DecodeLayer and through the reference backend's separate ops
// (RMSNorm, MatMul, RoPE, StoreKV, AttentionWindow, Add, SiLUMul) on
// shapes with GQA, head counts and widths off the SIMD lanes, sliding
// windows, contexts that split attention, and BF16, F16 and F32 weights.
// Tolerance: every residual value within 2e-5·(1 + max|x|) of the
// reference's, the new cache rows within 1e-5·(1 + max|k|) — the GEMVs'
// summation order carried through two layers' worth of sums.
func TestDecodeLayerEqualsSeparateOps(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	ref, err := kernels.NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(20, 4))
	type shape struct{ D, I, H, KV, d, pos, window int }
	for _, mode := range []struct {
		lv   Level
		opt  int
		name string
	}{{AVX2, 1, "one-job"}, {AVX512, 1, "one-job"}, {AVX512, 2, "five-jobs"}, {AVX2, 2, "five-jobs"}} {
		lv := mode.lv
		if !hasLevel(lv) {
			continue
		}
		hb, err := New(dev, Options{Threads: 3, Level: lv, FusedLayer: mode.opt})
		if err != nil {
			t.Fatal(err)
		}
		defer hb.Close()
		for _, sh := range []shape{
			{64, 96, 4, 2, 16, 0, 0}, {64, 96, 4, 2, 16, 9, 0}, {40, 70, 3, 1, 10, 5, 3},
			{128, 344, 8, 8, 16, 300, 0}, {256, 512, 4, 2, 64, 200, 64}, {96, 200, 6, 3, 32, 130, 0},
		} {
			for _, dt := range []runtime.DType{runtime.BF16, runtime.F16, runtime.F32} {
				t.Run(fmt.Sprintf("%v/%s/%+v/%v", lv, mode.name, sh, dt), func(t *testing.T) {
					D, I, H, KV, d := sh.D, sh.I, sh.H, sh.KV, sh.d
					C := sh.pos + 2
					scale := func(v []float32, f float32) []float32 {
						for i := range v {
							v[i] *= f
						}
						return v
					}
					w := func(n, k int) *runtime.Tensor {
						return tensorOf(t, dev, dt, scale(randF32(r, n*k), 1/float32(math.Sqrt(float64(k)))), n, k)
					}
					wq, wk, wv, wo := w(H*d, D), w(KV*d, D), w(KV*d, D), w(D, H*d)
					wg, wu, wd := w(I, D), w(I, D), w(D, I)
					nIn, nPost := tensorOf(t, dev, runtime.BF16, randF32(r, D), D), tensorOf(t, dev, runtime.BF16, randF32(r, D), D)
					x0 := scale(randF32(r, D), 3)
					kc0, vc0 := randF32(r, C*KV*d), randF32(r, C*KV*d)
					inv := make([]float32, d/2)
					for i := range inv {
						inv[i] = float32(math.Pow(10000, -2*float64(i)/float64(d)))
					}
					f32 := func(v []float32, shape ...int) *runtime.Tensor { return tensorOf(t, dev, runtime.F32, v, shape...) }
					zeros := func(shape ...int) *runtime.Tensor {
						n := 1
						for _, s := range shape {
							n *= s
						}
						return f32(make([]float32, n), shape...)
					}
					// Reference: the separate ops.
					x, kc, vc := f32(x0, 1, D), f32(kc0, C, KV, d), f32(vc0, C, KV, d)
					h, q, k, v, att, o := zeros(1, D), zeros(1, H, d), zeros(1, KV, d), zeros(1, KV, d), zeros(1, H, d), zeros(1, D)
					g, u := zeros(1, I), zeros(1, I)
					must := func(err error) {
						t.Helper()
						if err != nil {
							t.Fatal(err)
						}
					}
					must(ref.RMSNorm(h, x, nIn, 1e-5))
					must(ref.MatMul(q, h, wq))
					must(ref.MatMul(k, h, wk))
					must(ref.MatMul(v, h, wv))
					must(ref.RoPE(q, sh.pos, inv))
					must(ref.RoPE(k, sh.pos, inv))
					must(ref.StoreKV(kc, k, sh.pos))
					must(ref.StoreKV(vc, v, sh.pos))
					must(kernels.AttentionWindow(att.F32(), q.F32(), kc.F32(), vc.F32(), 1, sh.pos, H, KV, d, sh.window, nil))
					must(ref.MatMul(o, att, wo))
					must(ref.Add(x, x, o))
					must(ref.RMSNorm(h, x, nPost, 1e-5))
					must(ref.MatMul(g, h, wg))
					must(ref.MatMul(u, h, wu))
					must(ref.SiLUMul(g, g, u))
					must(ref.MatMul(o, g, wd))
					must(ref.Add(x, x, o))
					// One op.
					gx, gkc, gvc := f32(x0, 1, D), f32(kc0, C, KV, d), f32(vc0, C, KV, d)
					var st kernels.DecodeStages
					ran, err := hb.DecodeLayer(kernels.DecodeLayer{X: gx, InNorm: nIn, PostNorm: nPost, InEps: 1e-5, PostEps: 1e-5,
						WQ: wq, WK: wk, WV: wv, WO: wo, WGate: wg, WUp: wu, WDown: wd, KCache: gkc, VCache: gvc,
						Pos: sh.pos, Window: sh.window, InvFreq: inv,
						H: zeros(1, D), Q: zeros(1, H, d), K: zeros(1, KV, d), V: zeros(1, KV, d), Att: zeros(1, H, d), Gate: zeros(1, I), Stages: &st})
					must(err)
					if !ran || st.Steps != 1 {
						t.Fatalf("ran %v, %d stage steps: want the op to run once", ran, st.Steps)
					}
					close := func(what string, got, want []float32, tol float64) {
						t.Helper()
						var mx float64
						for _, v := range want {
							mx = max(mx, math.Abs(float64(v)))
						}
						for i := range want {
							if math.Abs(float64(got[i]-want[i])) > tol*(1+mx) {
								t.Fatalf("%s[%d] = %v, separate ops %v (max |value| %.3g)", what, i, got[i], want[i], mx)
							}
						}
					}
					close("x", gx.F32(), x.F32(), 2e-5)
					row := KV * d
					close("k cache", gkc.F32(), kc.F32(), 1e-5)
					close("v cache", gvc.F32(), vc.F32(), 1e-5)
					// Only row pos of the caches changed.
					for i, v := range gkc.F32() {
						if (i < sh.pos*row || i >= (sh.pos+1)*row) && v != kc0[i] {
							t.Fatalf("k cache value %d changed outside row %d", i, sh.pos)
						}
					}
				})
			}
		}
	}
}

// TestDecodeLayerDeclines checks the cases the op leaves to the separate
// ops (ran false, nothing written) and the errors it names.
func TestDecodeLayerDeclines(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	off, err := New(dev, Options{Threads: 2, FusedLayer: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	if ran, err := off.DecodeLayer(kernels.DecodeLayer{}); ran || err != nil {
		t.Fatalf("switched off: ran %v, err %v; want a plain decline", ran, err)
	}
	gen, err := New(dev, Options{Threads: 2, Level: Generic, FusedLayer: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer gen.Close()
	if ran, err := gen.DecodeLayer(kernels.DecodeLayer{}); ran || err != nil {
		t.Fatalf("generic level: ran %v, err %v; want a plain decline", ran, err)
	}
	on, err := New(dev, Options{Threads: 2, FusedLayer: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer on.Close()
	if on.Engine().Level() == Generic {
		t.Skip("no SIMD level on this CPU")
	}
	if _, err := on.DecodeLayer(kernels.DecodeLayer{}); err == nil {
		t.Fatal("nil weights: no error")
	}
	t.Setenv("FT_HOST_LAYER", "2")
	if _, err := New(dev, Options{}); err == nil {
		t.Fatal("FT_HOST_LAYER=2: no error")
	}
	if _, err := New(dev, Options{FusedLayer: 3}); err == nil {
		t.Fatal("FusedLayer 3: no error")
	}
}
