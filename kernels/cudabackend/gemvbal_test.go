//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// gemvBalCase is one product the split-K GEMVs take over: q/k/v
// (MatMulN, three weights), gate·up·SiLU (two), residual-adding (MatMulAdd,
// one; y starts at y0) or fp32-output (MatMul into F32, one).
type gemvBalCase struct {
	name string
	kind string // "qkv", "gateup", "acc", "f32out"
	Ns   []int  // rows of each weight
	D    int
}

// rows is the number of output rows (q/k/v stacked; gate·up's I).
func (c gemvBalCase) rows() int {
	if c.kind == "qkv" {
		return c.Ns[0] + c.Ns[1] + c.Ns[2]
	}
	return c.Ns[0]
}

// weightBytes is the bytes of weights one product streams.
func (c gemvBalCase) weightBytes() int64 {
	var n int64
	for _, N := range c.Ns {
		n += int64(N) * int64(c.D) * 2
	}
	return n
}

// gemvBalSetup makes c's operands (weights uniform in ±1/√D, x in ±1,
// y0 in ±4) and returns run, which launches the product on the weights of
// copy i % copies into fresh NaN-poisoned outputs (y0 copied into y for
// the adding kind) and returns them; launch does the same into fixed
// outputs without resetting them (timing).
func gemvBalSetup(t *testing.T, c gemvBalCase, copies int) (run func(i int) []*runtime.Tensor, launch func(i int) error) {
	t.Helper()
	rng := newRNG(t)
	x := gpu(t, runtime.BF16, randBF16(rng, c.D, 1), 1, c.D)
	a := float32(1 / math.Sqrt(float64(c.D)))
	ws := make([][]*runtime.Tensor, copies)
	for i := range ws {
		for _, N := range c.Ns {
			w := gpu(t, runtime.BF16, nil, N, c.D)
			if err := gb.FillUniform(w, rng.Uint64(), -a, a); err != nil {
				t.Fatal(err)
			}
			ws[i] = append(ws[i], w)
		}
	}
	y0 := randBF16(rng, c.Ns[0], 4)
	outs := func() []*runtime.Tensor {
		switch c.kind {
		case "qkv":
			return []*runtime.Tensor{poisoned(t, runtime.BF16, 1, c.Ns[0]), poisoned(t, runtime.BF16, 1, c.Ns[1]), poisoned(t, runtime.BF16, 1, c.Ns[2])}
		case "gateup":
			return []*runtime.Tensor{poisoned(t, runtime.BF16, 1, c.Ns[0])}
		case "acc":
			return []*runtime.Tensor{gpu(t, runtime.F32, y0, 1, c.Ns[0])}
		}
		return []*runtime.Tensor{poisoned(t, runtime.F32, 1, c.Ns[0])}
	}
	into := func(o []*runtime.Tensor, i int) error {
		w := ws[i%copies]
		switch c.kind {
		case "qkv":
			return gb.MatMulN(o, x, w)
		case "gateup":
			return gb.GateUpSiLU(o[0], x, w[0], w[1])
		case "acc":
			return gb.MatMulAdd(o[0], x, w[0])
		}
		return gb.MatMul(o[0], x, w[0])
	}
	run = func(i int) []*runtime.Tensor {
		o := outs()
		if err := into(o, i); err != nil {
			t.Fatal(err)
		}
		return o
	}
	fixed := outs()
	return run, func(i int) error { return into(fixed, i) }
}

// gemvBalModes are the one-token GEMV paths compared: gemv.cu's
// (FT_GEMV=persist), the pipelined default, the split-K twins (2 and 4
// segments a row, and the split chosen per shape: FT_GEMV=bal), and
// FT_GEMV=mixed (q/k/v on gemv.cu's kernel, the rest pipelined).
var gemvBalModes = []struct {
	name  string
	pipe  string
	split int
}{{"persist", "", 0}, {"pipe", "pipe", 0}, {"bal2", "pipe", 2}, {"bal4", "pipe", 4}, {"bal", "pipe", gemvBalAuto}, {gemvMixed, "pipe", 0}}

// setGEMVMode puts gb on one of gemvBalModes (q/k/v on gemv.cu's kernel,
// GEMVPersistQKV, only for "mixed", named by mode; none for the others)
// and returns a function restoring it.
func setGEMVMode(pipe string, split int, mode ...string) (restore func()) {
	p, s, q := gb.GEMVPipe, gb.GEMVBal, gb.GEMVPersistQKV
	gb.GEMVPipe, gb.GEMVBal, gb.GEMVPersistQKV = pipe, split, len(mode) > 0 && mode[0] == gemvMixed
	return func() { gb.GEMVPipe, gb.GEMVBal, gb.GEMVPersistQKV = p, s, q }
}

// TestGEMVBalMatchesPipe: with FT_GEMV=bal2, bal4 and bal (GEMVBal 2, 4,
// per shape) the
// one-token q/k/v, gate·up·SiLU, residual-adding and fp32-output products
// on Llama-3-8B's decode shapes and odd ones (fewer rows than warps, rows
// not a multiple of anything) launch the split-K kernels, write every
// element, give the same bits on a second run, and agree with the
// pipelined kernels (the default) to fp32 reordering: fp32 outputs within
// 1e-4 + 1e-5·|want| (the sums are O(1): x in ±1, weights in ±1/√D, y0 in
// ±4), bf16 outputs within one bf16 rounding step (1e-3 + 2⁻⁷·|want|),
// since the fp32 sums may fall on either side of a bf16 rounding boundary.
// Widths that are not a multiple of 8·S run on the pipelined kernels
// (the same bits).
func TestGEMVBalMatchesPipe(t *testing.T) {
	needGPU(t)
	cases := []gemvBalCase{
		{"qkv_llama3", "qkv", []int{4096, 1024, 1024}, 4096},
		{"qkv_odd", "qkv", []int{100, 37, 5}, 544},
		{"qkv_tiny", "qkv", []int{3, 2, 1}, 32},
		{"gateup_llama3", "gateup", []int{14336, 14336}, 4096},
		{"gateup_odd", "gateup", []int{1001, 1001}, 544},
		{"o_llama3", "acc", []int{4096}, 4096},
		{"down_llama3", "acc", []int{4096}, 14336},
		{"acc_odd", "acc", []int{7}, 14368},
		{"lmhead_llama3", "f32out", []int{128256}, 4096},
		{"f32out_odd", "f32out", []int{1001}, 96},
		{"fallback_qkv", "qkv", []int{64, 64, 64}, 520},
		{"fallback_acc", "acc", []int{333}, 136 + 8},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			run, _ := gemvBalSetup(t, c, 1)
			restore := setGEMVMode("pipe", 0)
			defer restore()
			var want [][]float32
			for _, o := range run(0) {
				want = append(want, read(t, o))
			}
			for _, S := range append(slices.Clone(gemvBalSplits), gemvBalAuto) {
				gb.GEMVBal = S
				mode := fmt.Sprintf("bal%d", S)
				fn := gb.k.gemv3
				switch c.kind {
				case "gateup":
					fn = gb.k.gateUp
				case "acc":
					fn = gb.k.gemvAcc
				case "f32out":
					fn = gb.k.gemvPersistF32
				}
				split := S
				if S == gemvBalAuto {
					mode = "bal"
					if split = gb.gemvBalAutoSplit(fn, c.rows(), c.D); split != 1 && (!slices.Contains(gemvBalSplits, split) || c.D%(8*split) != 0) {
						t.Fatalf("bal: split %d for %d rows of width %d", split, c.rows(), c.D)
					}
				}
				_, grid, smem, ok := gb.gemvBalPlan(fn, c.rows(), c.D)
				if wantOK := split > 1 && c.D%(8*split) == 0; ok != wantOK {
					t.Fatalf("%s: split-K plan %v (split %d) at width %d, want %v", mode, ok, split, c.D, wantOK)
				}
				first := run(0)
				second := run(0)
				for j, o := range first {
					got := read(t, o)
					again := read(t, second[j])
					what := fmt.Sprintf("%s output %d", mode, j)
					if k := sameBits(again, got); k >= 0 {
						t.Errorf("%s: element %d = %v on a second run, %v on the first", what, k, again[k], got[k])
					}
					switch {
					case !ok:
						if k := sameBits(got, want[j]); k >= 0 {
							t.Errorf("%s (pipelined fall-back): element %d = %v, want %v", what, k, got[k], want[j][k])
						}
					case o.DType() == runtime.F32:
						compare(t, what, got, want[j], 1e-4, 1e-5)
					default:
						compare(t, what, got, want[j], 1e-3, 1.0/128)
					}
				}
				if ok {
					t.Logf("%s: split %d, grid %d blocks, %d bytes of partial sums a block", mode, split, grid, smem)
				}
			}
		})
	}
}

// TestGEMVBalGraph: a decode-like sequence of the split-K products (q/k/v,
// gate·up·SiLU, o and down adding into one fp32 stream, the LM head) at
// GEMVBal 2 and 4, captured as a step graph and replayed (with dependent
// launch where the device uses it), leaves bit for bit what the same
// launches leave eagerly.
func TestGEMVBalGraph(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	const D, Q, KV, I, V = 512, 512, 128, 1536, 4000
	w := func(N, K int) *runtime.Tensor {
		x := gpu(t, runtime.BF16, nil, N, K)
		a := float32(1 / math.Sqrt(float64(K)))
		if err := gb.FillUniform(x, rng.Uint64(), -a, a); err != nil {
			t.Fatal(err)
		}
		return x
	}
	wq, wk, wv, wo, wg, wu, wd, lm := w(Q, D), w(KV, D), w(KV, D), w(D, Q), w(I, D), w(I, D), w(D, I), w(V, D)
	x := gpu(t, runtime.BF16, randBF16(rng, D, 1), 1, D)
	res0 := randBF16(rng, D, 2)
	type state struct{ q, k, v, act, res, xb, logits *runtime.Tensor }
	mk := func() state {
		return state{q: poisoned(t, runtime.BF16, 1, Q), k: poisoned(t, runtime.BF16, 1, KV), v: poisoned(t, runtime.BF16, 1, KV),
			act: poisoned(t, runtime.BF16, 1, I), res: gpu(t, runtime.F32, res0, 1, D), xb: poisoned(t, runtime.BF16, 1, D),
			logits: poisoned(t, runtime.F32, 1, V)}
	}
	step := func(s state) error {
		if err := gb.MatMulN([]*runtime.Tensor{s.q, s.k, s.v}, x, []*runtime.Tensor{wq, wk, wv}); err != nil {
			return err
		}
		if err := gb.MatMulAdd(s.res, s.q, wo); err != nil {
			return err
		}
		if err := gb.Cast(s.xb, s.res); err != nil {
			return err
		}
		if err := gb.GateUpSiLU(s.act, s.xb, wg, wu); err != nil {
			return err
		}
		if err := gb.MatMulAdd(s.res, s.act, wd); err != nil {
			return err
		}
		if err := gb.Cast(s.xb, s.res); err != nil {
			return err
		}
		return gb.MatMul(s.logits, s.xb, lm)
	}
	for _, S := range gemvBalSplits {
		t.Run(fmt.Sprintf("bal%d", S), func(t *testing.T) {
			defer setGEMVMode("pipe", S)()
			for _, c := range []struct {
				f    *cuda.Function
				N, D int
			}{{gb.k.gemv3, Q + 2*KV, D}, {gb.k.gemvAcc, D, Q}, {gb.k.gateUp, I, D}, {gb.k.gemvAcc, D, I}, {gb.k.gemvPersistF32, V, D}} {
				if _, _, _, ok := gb.gemvBalPlan(c.f, c.N, c.D); !ok {
					t.Fatalf("bal%d: no split-K plan for %d rows of width %d", S, c.N, c.D)
				}
			}
			g1, g2 := mk(), mk()
			graph, err := gb.CaptureStep(func() error { return step(g1) })
			if err != nil {
				t.Fatal(err)
			}
			defer graph.Close()
			for rep := range 3 {
				for _, s := range []state{g1, g2} {
					if err := gb.WriteBytes(s.res, f32Bytes(res0)); err != nil {
						t.Fatal(err)
					}
				}
				if err := graph.Replay(); err != nil {
					t.Fatal(err)
				}
				if err := step(g2); err != nil {
					t.Fatal(err)
				}
				for _, p := range []struct {
					what string
					g, e *runtime.Tensor
				}{{"q", g1.q, g2.q}, {"v", g1.v, g2.v}, {"act", g1.act, g2.act}, {"residual", g1.res, g2.res}, {"logits", g1.logits, g2.logits}} {
					got, want := read(t, p.g), read(t, p.e)
					if slices.ContainsFunc(want, func(v float32) bool { return math.IsNaN(float64(v)) }) {
						t.Fatalf("replay %d: %s unwritten eagerly", rep, p.what)
					}
					if k := sameBits(got, want); k >= 0 {
						t.Errorf("replay %d: %s element %d = %v, eager %v", rep, p.what, k, got[k], want[k])
					}
				}
			}
		})
	}
}

// TestGEMVBalBench times the one-token GEMVs of Llama-3-8B's decode step
// (q/k/v 4096+1024+1024 × 4096; o 4096 × 4096 and down 4096 × 14,336
// adding into fp32; gate·up·SiLU 2 × 14,336 × 4096; the LM head 128,256 ×
// 4096 into fp32) on each path of gemvBalModes, launched through the
// backend as a decode step launches them (dependent launch where the device
// uses it). The weights rotate over enough copies (≥ 160 MB) that no launch
// finds its weights in L2. eventTimes (fp8gemvrate_test.go) gives "single",
// the median of 20 launches with CUDA events around each (serialised, so
// each pays its ramp and tail), and "chained", the mean of 20 launches back
// to back (the kernels overlap as in a decode step). TB/s counts weight
// bytes. It fails if bal2 or bal4 falls back from the split-K kernels on
// one of these shapes, or a rate is outside 0-10 TB/s (not a timing of the
// work).
func TestGEMVBalBench(t *testing.T) {
	needGPU(t)
	cases := []gemvBalCase{
		{"qkv", "qkv", []int{4096, 1024, 1024}, 4096},
		{"o", "acc", []int{4096}, 4096},
		{"down", "acc", []int{4096}, 14336},
		{"gateup", "gateup", []int{14336, 14336}, 4096},
		{"lmhead", "f32out", []int{128256}, 4096},
	}
	const iters = 20
	busy := gpu(t, runtime.F32, nil, 1<<28)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			copies := int(max(1, (160<<20+c.weightBytes()-1)/c.weightBytes()))
			_, launch := gemvBalSetup(t, c, copies)
			fn := map[string]*cuda.Function{"qkv": gb.k.gemv3, "gateup": gb.k.gateUp, "acc": gb.k.gemvAcc, "f32out": gb.k.gemvPersistF32}[c.kind]
			for _, m := range gemvBalModes {
				med, per := func() (time.Duration, time.Duration) {
					defer setGEMVMode(m.pipe, m.split, m.name)()
					if m.split > 1 {
						if _, _, _, ok := gb.gemvBalPlan(fn, c.rows(), c.D); !ok {
							t.Fatalf("%s: no split-K plan for %d rows of width %d (a fall-back)", m.name, c.rows(), c.D)
						}
					}
					return eventTimes(t, iters, busy, launch)
				}()
				tbs := func(d time.Duration) float64 { return float64(c.weightBytes()) / d.Seconds() / 1e12 }
				t.Logf("%-6s %-7s single %7.2f µs %5.2f TB/s   chained %7.2f µs %5.2f TB/s   (%.1f MB, %d copies)",
					c.name, m.name, float64(med.Nanoseconds())/1e3, tbs(med), float64(per.Nanoseconds())/1e3, tbs(per), float64(c.weightBytes())/1e6, copies)
				for _, r := range []float64{tbs(med), tbs(per)} {
					if !(r > 0 && r < 10) {
						t.Errorf("%s %s: %.2f TB/s (single %v, chained %v a launch for %d bytes): not a timing of the work", c.name, m.name, r, med, per, c.weightBytes())
					}
				}
			}
		})
	}
}
