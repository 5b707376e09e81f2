//go:build cuda

package cudabackend

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// The persistent one-kernel decode layer (decodelayer.go) against the
// backend's separate ops (tight: the same bf16 rounding points, other
// summation orders) and against a plain Go reference (looser), at several
// shapes (Llama-3-8B's among them) and context lengths; repeated launches
// and a captured graph replayed at several positions; the operands it
// declines.

// megaCase is one layer shape: width D, H query and KV key/value heads of
// width 128, MLP width I, cache capacity C.
type megaCase struct{ D, H, KV, I, C int }

// megaWeights are a layer's random weights and cache contents (bf16
// values), and the GPU tensors holding them.
type megaWeights struct {
	c                                      megaCase
	inN, postN, wq, wk, wv, wo, wg, wu, wd []float32
	kc, vc                                 []float32
	inv                                    []float32
	g                                      struct{ inN, postN, wq, wk, wv, wo, wg, wu, wd *runtime.Tensor }
}

func newMegaWeights(t *testing.T, rng *rand.Rand, c megaCase) *megaWeights {
	t.Helper()
	w := &megaWeights{c: c}
	D, Hd, Kd, I := c.D, c.H*128, c.KV*128, c.I
	sD, sI, sH := float32(1/math.Sqrt(float64(D))), float32(1/math.Sqrt(float64(I))), float32(1/math.Sqrt(float64(Hd)))
	norm := func(n int) []float32 {
		v := randBF16(rng, n, 0.2)
		for i := range v {
			v[i] = runtime.BF16ToF32(runtime.F32ToBF16(1 + v[i]))
		}
		return v
	}
	w.inN, w.postN = norm(D), norm(D)
	w.wq, w.wk, w.wv = randBF16(rng, Hd*D, 2*sD), randBF16(rng, Kd*D, 2*sD), randBF16(rng, Kd*D, 2*sD)
	w.wo = randBF16(rng, D*Hd, sH)
	w.wg, w.wu, w.wd = randBF16(rng, I*D, 2*sD), randBF16(rng, I*D, 2*sD), randBF16(rng, D*I, sI)
	w.kc, w.vc = randBF16(rng, c.C*Kd, 1), randBF16(rng, c.C*Kd, 1)
	var err error
	if w.inv, err = kernels.RopeInvFreq(128, 500000, kernels.RopeScaling{Type: "default"}); err != nil {
		t.Fatal(err)
	}
	w.g.inN, w.g.postN = gpu(t, runtime.BF16, w.inN, D), gpu(t, runtime.BF16, w.postN, D)
	w.g.wq, w.g.wk, w.g.wv = gpu(t, runtime.BF16, w.wq, Hd, D), gpu(t, runtime.BF16, w.wk, Kd, D), gpu(t, runtime.BF16, w.wv, Kd, D)
	w.g.wo = gpu(t, runtime.BF16, w.wo, D, Hd)
	w.g.wg, w.g.wu, w.g.wd = gpu(t, runtime.BF16, w.wg, I, D), gpu(t, runtime.BF16, w.wu, I, D), gpu(t, runtime.BF16, w.wd, D, I)
	return w
}

// operands are fresh GPU copies of x and the caches, with scratch, for a
// step at pos.
func (w *megaWeights) operands(t *testing.T, x []float32, pos int) kernels.DecodeLayer {
	t.Helper()
	c := w.c
	return kernels.DecodeLayer{
		X: gpu(t, runtime.F32, x, 1, c.D), InNorm: w.g.inN, PostNorm: w.g.postN, InEps: 1e-5, PostEps: 1e-5,
		WQ: w.g.wq, WK: w.g.wk, WV: w.g.wv, WO: w.g.wo, WGate: w.g.wg, WUp: w.g.wu, WDown: w.g.wd,
		KCache: gpu(t, runtime.BF16, w.kc, c.C, c.KV, 128), VCache: gpu(t, runtime.BF16, w.vc, c.C, c.KV, 128),
		Pos: pos, InvFreq: w.inv,
		H: poisoned(t, runtime.BF16, 1, c.D), Q: poisoned(t, runtime.BF16, 1, c.H, 128), K: poisoned(t, runtime.BF16, 1, c.KV, 128),
		V: poisoned(t, runtime.BF16, 1, c.KV, 128), Att: poisoned(t, runtime.BF16, 1, c.H, 128), Gate: poisoned(t, runtime.BF16, 1, c.I),
	}
}

// separate runs a's step through the backend's separate ops (the decoder's
// op-by-op path).
func megaSeparate(a kernels.DecodeLayer) error {
	if err := gb.RMSNorm(a.H, a.X, a.InNorm, a.InEps); err != nil {
		return err
	}
	if err := gb.MatMulN([]*runtime.Tensor{a.Q, a.K, a.V}, a.H, []*runtime.Tensor{a.WQ, a.WK, a.WV}); err != nil {
		return err
	}
	if err := gb.RoPEStoreKV(a.Q, a.K, a.V, a.KCache, a.VCache, a.Pos, a.InvFreq); err != nil {
		return err
	}
	if err := gb.Attention(a.Att, a.Q, a.KCache, a.VCache, a.Pos); err != nil {
		return err
	}
	att, err := a.Att.Reshape(1, a.Att.NumElements())
	if err != nil {
		return err
	}
	if err := gb.MatMulAdd(a.X, att, a.WO); err != nil {
		return err
	}
	if err := gb.RMSNorm(a.H, a.X, a.PostNorm, a.PostEps); err != nil {
		return err
	}
	if err := gb.GateUpSiLU(a.Gate, a.H, a.WGate, a.WUp); err != nil {
		return err
	}
	return gb.MatMulAdd(a.X, a.Gate, a.WDown)
}

func bf(v float64) float64 { return float64(runtime.BF16ToF32(runtime.F32ToBF16(float32(v)))) }

// gemvRef is out[r] = Σ w[r,k]·x[k] in float64, rows in parallel.
func gemvRef(w []float32, x []float64, N int) []float64 {
	D := len(x)
	out := make([]float64, N)
	var wg sync.WaitGroup
	const parts = 16
	for p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := p * N / parts; r < (p+1)*N/parts; r++ {
				s := 0.0
				for k, v := range w[r*D : (r+1)*D] {
					s += float64(v) * x[k]
				}
				out[r] = s
			}
		}()
	}
	wg.Wait()
	return out
}

// reference is the layer's step in plain Go (float64, bf16 rounding where
// the kernels round): the new x and the cache rows written at pos.
func (w *megaWeights) reference(x []float32, pos int) (xo, kRow, vRow []float64) {
	c := w.c
	D, H, KV, I, d := c.D, c.H, c.KV, c.I, 128
	norm := func(x []float64, nw []float32) []float64 {
		s := 0.0
		for _, v := range x {
			s += v * v
		}
		sc := 1 / math.Sqrt(s/float64(D)+1e-5)
		h := make([]float64, D)
		for i, v := range x {
			h[i] = bf(v * sc * float64(nw[i]))
		}
		return h
	}
	xs := make([]float64, D)
	for i, v := range x {
		xs[i] = float64(v)
	}
	h := norm(xs, w.inN)
	q, k, v := gemvRef(w.wq, h, H*d), gemvRef(w.wk, h, KV*d), gemvRef(w.wv, h, KV*d)
	for _, t := range [][]float64{q, k, v} {
		for i := range t {
			t[i] = bf(t[i])
		}
	}
	rot := func(t []float64) {
		for hh := 0; hh < len(t)/d; hh++ {
			for i := range d / 2 {
				th := float64(float32(pos) * w.inv[i])
				s, co := math.Sincos(th)
				a, b := t[hh*d+i], t[hh*d+i+d/2]
				t[hh*d+i], t[hh*d+i+d/2] = bf(a*co-b*s), bf(b*co+a*s)
			}
		}
	}
	rot(q)
	rot(k)
	att := make([]float64, H*d)
	G := H / KV
	for hq := range H {
		g := hq / G
		sc := make([]float64, pos+1)
		m := math.Inf(-1)
		for j := 0; j <= pos; j++ {
			s := 0.0
			for i := range d {
				kv := k[g*d+i]
				if j != pos {
					kv = float64(w.kc[(j*KV+g)*d+i])
				}
				s += q[hq*d+i] * kv
			}
			sc[j] = s / math.Sqrt(float64(d))
			m = math.Max(m, sc[j])
		}
		sum := 0.0
		for j := range sc {
			sc[j] = math.Exp(sc[j] - m)
			sum += sc[j]
		}
		for i := range d {
			a := 0.0
			for j := 0; j <= pos; j++ {
				vv := v[g*d+i]
				if j != pos {
					vv = float64(w.vc[(j*KV+g)*d+i])
				}
				a += sc[j] * vv
			}
			att[hq*d+i] = bf(a / sum)
		}
	}
	o := gemvRef(w.wo, att, D)
	for i := range xs {
		xs[i] = float64(float32(xs[i] + o[i]))
	}
	h = norm(xs, w.postN)
	gt, up := gemvRef(w.wg, h, I), gemvRef(w.wu, h, I)
	act := make([]float64, I)
	for i := range act {
		act[i] = bf(gt[i] / (1 + math.Exp(-gt[i])) * up[i])
	}
	dn := gemvRef(w.wd, act, D)
	for i := range xs {
		xs[i] = float64(float32(xs[i] + dn[i]))
	}
	return xs, k, v
}

func f64s(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// withMega turns DecodeMega on for the test.
func withMega(t *testing.T) {
	saved := gb.DecodeMega
	gb.DecodeMega = true
	t.Cleanup(func() { gb.DecodeMega = saved })
}

// needMega skips t without a GPU of compute capability 9.0 (the only one
// the kernel runs on), else turns DecodeMega on for t (withMega).
func needMega(t *testing.T) {
	t.Helper()
	needGPU(t)
	if gdev.ComputeCapability() != 90 {
		t.Skipf("compute capability %d, want 9.0", gdev.ComputeCapability())
	}
	withMega(t)
}

// cacheRow is row pos of a [C,KV,128] cache read back.
func cacheRow(all []float32, pos, KV int) []float32 { return all[pos*KV*128 : (pos+1)*KV*128] }

// TestDecodeMegaLayer: X and the caches after the one-kernel layer equal
// the separate ops' (|diff| ≤ 1e-2 + 1e-2·|want| on X and the new cache
// rows, every other cache row untouched) and the Go reference's (3e-2 +
// 3e-2·|want|), at Llama-3-8B's shape and small ones, at contexts 1, 37,
// 512 and 4,100 (the positions 0, 36, 511, 4,099).
func TestDecodeMegaLayer(t *testing.T) {
	needMega(t)
	rng := newRNG(t)
	for _, c := range []megaCase{
		{D: 4096, H: 32, KV: 8, I: 14336, C: 4160},
		{D: 256, H: 4, KV: 2, I: 352, C: 4160},
		{D: 136, H: 3, KV: 1, I: 72, C: 600},
		{D: 1024, H: 16, KV: 2, I: 2816, C: 600},
	} {
		t.Run(fmt.Sprintf("D%d_H%d_KV%d_I%d", c.D, c.H, c.KV, c.I), func(t *testing.T) {
			w := newMegaWeights(t, rng, c)
			for _, ctx := range []int{1, 37, 512, 4100} {
				if ctx > c.C {
					continue
				}
				pos := ctx - 1
				x := randBF16(rng, c.D, 1)
				a := w.operands(t, x, pos)
				s := w.operands(t, x, pos)
				ran, err := gb.DecodeLayer(a)
				if err != nil || !ran {
					t.Fatalf("context %d: DecodeLayer ran %v, %v", ctx, ran, err)
				}
				if err := megaSeparate(s); err != nil {
					t.Fatal(err)
				}
				got, want := read(t, a.X), read(t, s.X)
				what := fmt.Sprintf("context %d", ctx)
				compare(t, what+": x against the separate ops", got, want, 1e-2, 1e-2)
				gk, gv, sk, sv := read(t, a.KCache), read(t, a.VCache), read(t, s.KCache), read(t, s.VCache)
				compare(t, what+": k cache row against the separate ops", cacheRow(gk, pos, c.KV), cacheRow(sk, pos, c.KV), 1e-2, 1e-2)
				compare(t, what+": v cache row against the separate ops", cacheRow(gv, pos, c.KV), cacheRow(sv, pos, c.KV), 1e-2, 1e-2)
				for _, r := range []int{0, pos / 2, pos - 1, pos + 1, c.C - 1} {
					if r < 0 || r >= c.C || r == pos {
						continue
					}
					for i, v := range cacheRow(gk, r, c.KV) {
						if v != cacheRow(w.kc, r, c.KV)[i] || cacheRow(gv, r, c.KV)[i] != cacheRow(w.vc, r, c.KV)[i] {
							t.Fatalf("%s: cache row %d changed (element %d)", what, r, i)
						}
					}
				}
				rx, rk, rv := w.reference(x, pos)
				compare(t, what+": x against the Go reference", got, f64s(rx), 3e-2, 3e-2)
				compare(t, what+": k cache row against the Go reference", cacheRow(gk, pos, c.KV), f64s(rk), 3e-2, 3e-2)
				compare(t, what+": v cache row against the Go reference", cacheRow(gv, pos, c.KV), f64s(rv), 3e-2, 3e-2)
			}
		})
	}
}

// TestDecodeMegaGraph: the layer launched 5 times in a row from the same x
// (the barrier words reset themselves) gives the same bits each time, and
// a graph captured once and replayed at positions 3, 700, 0, 129 and 2,047
// (read from the step buffer) gives the eager launch's bits at each.
func TestDecodeMegaGraph(t *testing.T) {
	needMega(t)
	rng := newRNG(t)
	c := megaCase{D: 4096, H: 32, KV: 8, I: 14336, C: 2048}
	w := newMegaWeights(t, rng, c)
	x := randBF16(rng, c.D, 1)

	a := w.operands(t, x, 300)
	var first []float32
	for i := range 5 {
		if err := gb.WriteBytes(a.X, f32Bytes(x)); err != nil {
			t.Fatal(err)
		}
		if ran, err := gb.DecodeLayer(a); err != nil || !ran {
			t.Fatalf("launch %d: ran %v, %v", i, ran, err)
		}
		got := read(t, a.X)
		if i == 0 {
			first = got
			continue
		}
		compare(t, fmt.Sprintf("launch %d against the first", i), got, first, 0, 0)
	}

	g := w.operands(t, x, 3)
	graph, err := gb.CaptureStep(func() error {
		ran, err := gb.DecodeLayer(g)
		if err == nil && !ran {
			err = fmt.Errorf("DecodeLayer declined while capturing")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer graph.Close()
	for _, pos := range []int{3, 700, 0, 129, 2047} {
		e := w.operands(t, x, pos)
		if ran, err := gb.DecodeLayer(e); err != nil || !ran {
			t.Fatalf("eager at %d: ran %v, %v", pos, ran, err)
		}
		// The graph's operands as the eager launch's: x and the caches
		// (earlier replays wrote their rows).
		for _, c := range []struct {
			t    *runtime.Tensor
			data []byte
		}{{g.X, f32Bytes(x)}, {g.KCache, bf16Bytes(w.kc)}, {g.VCache, bf16Bytes(w.vc)}} {
			if err := gb.WriteBytes(c.t, c.data); err != nil {
				t.Fatal(err)
			}
		}
		if err := gb.SetStep([]int32{0}, pos); err != nil {
			t.Fatal(err)
		}
		if err := graph.Replay(); err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("replay at %d", pos)
		compare(t, what+": x", read(t, g.X), read(t, e.X), 0, 0)
		compare(t, what+": k cache row", cacheRow(read(t, g.KCache), pos, c.KV), cacheRow(read(t, e.KCache), pos, c.KV), 0, 0)
		compare(t, what+": v cache row", cacheRow(read(t, g.VCache), pos, c.KV), cacheRow(read(t, e.VCache), pos, c.KV), 0, 0)
	}
}

// TestDecodeMegaDeclines: with the switch off, and for operands the kernel
// does not take (head width 64, FP32 weights, a sliding window, more than
// 8 query heads per KV head, the position past the cache, an F32-less
// residual, a residual or a norm weight not 16-byte aligned), DecodeLayer
// answers false, with no error, and leaves x as it was.
func TestDecodeMegaDeclines(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	c := megaCase{D: 256, H: 4, KV: 2, I: 352, C: 64}
	w := newMegaWeights(t, rng, c)
	x := randBF16(rng, c.D, 1)
	check := func(what string, a kernels.DecodeLayer) {
		t.Helper()
		ran, err := gb.DecodeLayer(a)
		if err != nil || ran {
			t.Errorf("%s: ran %v, %v; want a decline", what, ran, err)
		}
		if a.X.DType() == runtime.F32 {
			compare(t, what+": x untouched", read(t, a.X), x, 0, 0)
		}
	}
	saved := gb.DecodeMega
	gb.DecodeMega = false
	check("switch off", w.operands(t, x, 5))
	gb.DecodeMega = true
	defer func() { gb.DecodeMega = saved }()
	if gdev.ComputeCapability() != 90 {
		check("compute capability "+fmt.Sprint(gdev.ComputeCapability()), w.operands(t, x, 5))
		return
	}
	a := w.operands(t, x, 5)
	a.Window = 16
	check("sliding window", a)
	a = w.operands(t, x, c.C)
	check("position at capacity", a)
	a = w.operands(t, x, 5)
	a.WQ = gpu(t, runtime.F32, w.wq, c.H*128, c.D)
	check("F32 q weight", a)
	a = w.operands(t, x, 5)
	a.X = gpu(t, runtime.BF16, x, 1, c.D)
	check("BF16 residual", a)
	// Heads 64 wide: caches [C, 2KV, 64] and the same q/k/v rows as H (KV)
	// heads 128 wide. InvFreq keeps its 64 entries so that the head-width
	// checks, not the table's length, decline.
	a = w.operands(t, x, 5)
	a.KCache, a.VCache = gpu(t, runtime.BF16, nil, c.C, 2*c.KV, 64), gpu(t, runtime.BF16, nil, c.C, 2*c.KV, 64)
	a.WQ = gpu(t, runtime.BF16, w.wq, 2*c.H*64, c.D)
	a.WK, a.WV = gpu(t, runtime.BF16, w.wk, 2*c.KV*64, c.D), gpu(t, runtime.BF16, w.wv, 2*c.KV*64, c.D)
	a.Q, a.Att = poisoned(t, runtime.BF16, 1, 2*c.H, 64), poisoned(t, runtime.BF16, 1, 2*c.H, 64)
	if len(a.InvFreq) != 64 {
		t.Fatalf("head width 64 case: %d frequencies, want 64", len(a.InvFreq))
	}
	check("head width 64", a)
	// The residual 4 bytes past a 16-byte boundary (a view one element
	// into its buffer, holding x), and the input norm's weight 2 bytes past.
	a = w.operands(t, x, 5)
	xb := gpu(t, runtime.F32, append([]float32{0}, x...), c.D+1)
	xv, err := xb.Slice(1, c.D+1)
	if err != nil {
		t.Fatal(err)
	}
	if a.X, err = xv.Reshape(1, c.D); err != nil {
		t.Fatal(err)
	}
	if a.X.Ptr()%16 == 0 {
		t.Fatalf("the misaligned residual is at %#x, 16-byte aligned", a.X.Ptr())
	}
	check("residual not 16-byte aligned", a)
	a = w.operands(t, x, 5)
	nb := gpu(t, runtime.BF16, append([]float32{1}, w.inN...), c.D+1)
	if a.InNorm, err = nb.Slice(1, c.D+1); err != nil {
		t.Fatal(err)
	}
	if a.InNorm.Ptr()%16 == 0 {
		t.Fatalf("the misaligned norm weight is at %#x, 16-byte aligned", a.InNorm.Ptr())
	}
	check("input norm weight not 16-byte aligned", a)
	// 16 query heads on one KV head.
	n := 16
	a = w.operands(t, x, 5)
	a.WQ, a.WO = gpu(t, runtime.BF16, nil, n*128, c.D), gpu(t, runtime.BF16, nil, c.D, n*128)
	a.WK, a.WV = gpu(t, runtime.BF16, nil, 128, c.D), gpu(t, runtime.BF16, nil, 128, c.D)
	a.KCache, a.VCache = gpu(t, runtime.BF16, nil, c.C, 1, 128), gpu(t, runtime.BF16, nil, c.C, 1, 128)
	a.Q, a.Att = poisoned(t, runtime.BF16, 1, n, 128), poisoned(t, runtime.BF16, 1, n, 128)
	check("16 query heads a KV head", a)
}

// runNames reports whether go test's -run pattern names the test
// explicitly (holds its name as written), not merely matches it.
func runNames(name string) bool {
	f := flag.Lookup("test.run")
	return f != nil && strings.Contains(f.Value.String(), name)
}

// TestDecodeMegaTime prints the one-kernel layer's time at Llama-3-8B's
// shape against the separate ops' (eventTimes: median of 30 launches and
// the mean of 30 back to back, contexts 512 and 8,192) and the HBM floor of its weight bytes
// at 4.12 TB/s. It is a measurement, not a test: it asserts nothing about
// the times, only that the op ran. So it runs only when -run names it
// (-run DecodeMegaTime); a run of the package or of -run DecodeMega skips
// it rather than spend GPU time on figures nobody reads.
func TestDecodeMegaTime(t *testing.T) {
	if !runNames("DecodeMegaTime") {
		t.Skip("a print-only timing: runs only with -run DecodeMegaTime")
	}
	needMega(t)
	rng := newRNG(t)
	c := megaCase{D: 4096, H: 32, KV: 8, I: 14336, C: 8192}
	w := newMegaWeights(t, rng, c)
	x := randBF16(rng, c.D, 1)
	busy := gpu(t, runtime.F32, nil, 1<<28)
	weights := 2 * (int64(c.H+2*c.KV)*128*int64(c.D) + int64(c.D)*int64(c.H)*128 + 3*int64(c.I)*int64(c.D))
	for _, ctx := range []int{512, 8192} {
		a := w.operands(t, x, ctx-1)
		mega, megaMean := eventTimes(t, 30, busy, func(int) error {
			ran, err := gb.DecodeLayer(a)
			if err == nil && !ran {
				err = fmt.Errorf("DecodeLayer declined")
			}
			return err
		})
		sep, sepMean := eventTimes(t, 30, busy, func(int) error { return megaSeparate(a) })
		kv := int64(2*2*ctx*c.KV) * 128
		floor := time.Duration(float64(weights+kv) / 4.12e12 * 1e9)
		fmt.Printf("decode layer, context %d: one kernel %v (mean back to back %v), separate ops %v (%v), HBM floor (%.0f MB at 4.12 TB/s) %v\n",
			ctx, mega, megaMean, sep, sepMean, float64(weights+kv)/1e6, floor)
	}
}

// TestDecodeMegaPhases prints where the one-kernel layer's time goes at
// Llama-3-8B's shape, context 512: for each of the kernel's timer points
// (dl_mark), the median and the latest block's time since the earliest
// block started, from one traced launch after a warm-up. It asserts that
// the grid is the occupancy kept in the backend (blocks a multiprocessor,
// at least 1) × the multiprocessors, that every block of it, and no block
// past it, recorded its points, and in order.
func TestDecodeMegaPhases(t *testing.T) {
	needMega(t)
	rng := newRNG(t)
	c := megaCase{D: 4096, H: 32, KV: 8, I: 14336, C: 8192}
	w := newMegaWeights(t, rng, c)
	x := randBF16(rng, c.D, 1)
	names := []string{"start", "norm", "q/k/v", "barrier 1", "attention", "barrier 2", "merge", "barrier 3",
		"o_proj", "barrier 4", "post-norm", "gate·up", "barrier 5", "down (end)"}
	for _, ctx := range []int{512, 8192} {
		a := w.operands(t, x, ctx-1)
		for i := 0; i < 3; i++ { // warm-up
			if ran, err := gb.DecodeLayer(a); err != nil || !ran {
				t.Fatalf("warm-up: ran %v, %v", ran, err)
			}
		}
		if gb.mega.occSmem == 0 || gb.mega.blocksPerSM < 1 {
			t.Fatalf("after the warm-up the backend keeps no occupancy (smem %d, %d blocks a multiprocessor)", gb.mega.occSmem, gb.mega.blocksPerSM)
		}
		grid := gb.sms * gb.mega.blocksPerSM
		slots := grid + gb.sms // a multiprocessor's worth past the grid, which must stay zero
		tr := gpu(t, runtime.F32, make([]float32, 2*megaMarks*slots), 2*megaMarks*slots)
		gb.mega.trace = tr.Ptr()
		ran, err := gb.DecodeLayer(a)
		gb.mega.trace = 0
		if err != nil || !ran {
			t.Fatalf("traced launch: ran %v, %v", ran, err)
		}
		raw := make([]byte, tr.NumBytes())
		if err := gb.ReadBytes(raw, tr); err != nil {
			t.Fatal(err)
		}
		nb := 0
		marks := func(b, k int) uint64 {
			o := 8 * (b*megaMarks + k)
			return uint64(raw[o]) | uint64(raw[o+1])<<8 | uint64(raw[o+2])<<16 | uint64(raw[o+3])<<24 |
				uint64(raw[o+4])<<32 | uint64(raw[o+5])<<40 | uint64(raw[o+6])<<48 | uint64(raw[o+7])<<56
		}
		for b := 0; b < slots; b++ {
			if marks(b, 0) != 0 {
				nb++
				if b >= grid {
					t.Fatalf("block %d recorded a start, past the grid of %d (%d a multiprocessor × %d)", b, grid, gb.mega.blocksPerSM, gb.sms)
				}
			}
		}
		if nb != grid {
			t.Fatalf("%d blocks recorded their start, want the grid's %d (%d a multiprocessor × %d)", nb, grid, gb.mega.blocksPerSM, gb.sms)
		}
		t0 := marks(0, 0)
		for b := 0; b < nb; b++ {
			t0 = min(t0, marks(b, 0))
		}
		fmt.Printf("decode layer phases, context %d, %d blocks (µs since the first block's start: median, latest block):\n", ctx, nb)
		prevMed := 0.0
		for k, name := range names {
			v := make([]float64, nb)
			for b := 0; b < nb; b++ {
				m := marks(b, k)
				if m < t0 || (k > 0 && m < marks(b, k-1)) {
					t.Fatalf("block %d: point %d (%s) out of order", b, k, name)
				}
				v[b] = float64(m-t0) / 1e3
			}
			sort.Float64s(v)
			med := v[nb/2]
			fmt.Printf("  %-12s %8.2f %8.2f   (+%.2f)\n", name, med, v[nb-1], med-prevMed)
			prevMed = med
		}
	}
}
