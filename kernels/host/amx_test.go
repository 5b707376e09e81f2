package host

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// amxEngines are engines with the AMX products at each pass count, one and
// three threads; the test is skipped where the CPU or OS has no tiles.
func amxEngines(t *testing.T, passes ...int) []*Engine {
	t.Helper()
	if !hasAMX() {
		t.Skip("no AMX tiles on this CPU or OS")
	}
	var es []*Engine
	for _, p := range passes {
		for _, th := range []int{1, 3} {
			e, err := NewEngine(Options{Threads: th, AMXPasses: p})
			if err != nil {
				t.Fatal(err)
			}
			if e.AMXPasses() != p {
				t.Fatalf("engine asked for %d AMX passes runs %d", p, e.AMXPasses())
			}
			t.Cleanup(e.Close)
			es = append(es, e)
		}
	}
	return es
}

// amxShapes are [n, k] with k a multiple of 32: one row pair, pairs and a
// remainder, fewer rows than a pair, and k past one sweep (amxKSteps).
var amxShapes = [][2]int{{32, 32}, {64, 96}, {70, 64}, {7, 32}, {96, 32 * (amxKSteps + 3)}}

// TestAMXMatMulEqualsReference: 3-pass AMX products are within the SIMD
// tiles' tolerance of the reference, at token counts from one tile to past
// a slab, the same bits at one and three threads and whatever T; 1-pass
// ones within bf16's rounding of x.
func TestAMXMatMulEqualsReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	Ts := []int{16, 17, 40, 129, amxSlab + 20}
	if raceEnabled {
		Ts = []int{16, 40}
	}
	for _, e := range amxEngines(t, 3, 2, 1) {
		for _, sh := range amxShapes {
			n, k := sh[0], sh[1]
			w := randMat(r, runtime.BF16, n, k)
			wf := widenMat(w)
			for _, T := range Ts {
				name := fmt.Sprintf("%d passes/%d threads/%dx%d/T%d", e.AMXPasses(), e.Threads(), n, k, T)
				x := randF32(r, T*k)
				want := make([]float32, T*n)
				if err := kernels.MatMul(want, x, T, w); err != nil {
					t.Fatal(err)
				}
				got := make([]float32, T*n)
				if err := e.MatMul(got, x, T, w); err != nil {
					t.Fatal(err)
				}
				mag := magnitude(wf, x, T, n, k)
				if e.AMXPasses() >= 2 {
					checkTol(t, name, got, want, mag)
				} else {
					for i := range want {
						// x rounded to bf16: each product off by ≤ 2⁻⁹ of itself.
						if d := math.Abs(float64(got[i] - want[i])); d > 0x1p-9*mag[i]+1e-5*mag[i] {
							t.Fatalf("%s: [%d] = %v, reference %v (|Δ| %.3g, Σ|w·x| %.3g)", name, i, got[i], want[i], d, mag[i])
						}
					}
				}
				// The last 16 tokens alone give the same bits.
				tail := make([]float32, 16*n)
				if err := e.MatMul(tail, x[(T-16)*k:], 16, w); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(tail, got[(T-16)*n:]) {
					t.Fatalf("%s: the last 16 tokens alone differ", name)
				}
			}
		}
	}
}

// TestAMXMultiAndGateUp: several weights over one x (q, k, v), a product
// added into its output, and gate·up with SiLU, each against the
// reference.
func TestAMXMultiAndGateUp(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	const T, k = 33, 64
	for _, e := range amxEngines(t, 3) {
		x := randF32(r, T*k)
		ws := []kernels.Mat{randMat(r, runtime.BF16, 64, k), randMat(r, runtime.BF16, 40, k), randMat(r, runtime.BF16, 32, k)}
		var segs []segment
		var wants, mags [][]float64
		outs := make([][]float32, len(ws))
		for i, w := range ws {
			outs[i] = randF32(r, T*w.Rows)
			want := make([]float32, T*w.Rows)
			if err := kernels.MatMul(want, x, T, w); err != nil {
				t.Fatal(err)
			}
			acc := i == 1
			w64 := make([]float64, len(want))
			for j := range want {
				w64[j] = float64(want[j])
				if acc {
					w64[j] += float64(outs[i][j])
				}
			}
			wants = append(wants, w64)
			mags = append(mags, magnitude(widenMat(w), x, T, w.Rows, k))
			segs = append(segs, segment{w: fromMat(w), out: outs[i], ldo: w.Rows, acc: acc})
		}
		e.multi(x, T, segs)
		for i := range ws {
			for j, g := range outs[i] {
				if d := math.Abs(float64(g) - wants[i][j]); d > tolRel*mags[i][j]+1e-6 {
					t.Fatalf("%d threads: weight %d [%d] = %v, want %v", e.Threads(), i, j, g, wants[i][j])
				}
			}
		}

		wg, wu := randMat(r, runtime.BF16, 64, k), randMat(r, runtime.BF16, 64, k)
		got := make([]float32, T*64)
		if err := e.GateUpSiLU(got, x, T, wg, wu); err != nil {
			t.Fatal(err)
		}
		g, u := make([]float32, T*64), make([]float32, T*64)
		if err := kernels.MatMul(g, x, T, wg); err != nil {
			t.Fatal(err)
		}
		if err := kernels.MatMul(u, x, T, wu); err != nil {
			t.Fatal(err)
		}
		mg, mu := magnitude(widenMat(wg), x, T, 64, k), magnitude(widenMat(wu), x, T, 64, k)
		for i := range got {
			want := float64(g[i]) / (1 + math.Exp(-float64(g[i]))) * float64(u[i])
			// |d(silu(g)·u)| ≤ 1.1·|u|·|dg| + |silu(g)|·|du|.
			tol := tolRel*(1.1*math.Abs(float64(u[i]))*mg[i]+math.Abs(float64(g[i]))*mu[i]) + 1e-6*math.Abs(want) + 1e-7
			if d := math.Abs(float64(got[i]) - want); d > tol {
				t.Fatalf("%d threads: gate·up [%d] = %v, want %v (|Δ| %.3g > %.3g)", e.Threads(), i, got[i], want, d, tol)
			}
		}
	}
}

// TestAMXPassesOption: the option and FT_HOST_AMX pick the passes, bad
// values are errors naming what is wrong.
func TestAMXPassesOption(t *testing.T) {
	// Wrong values are errors whether or not this CPU has the tiles.
	if _, err := NewEngine(Options{AMXPasses: 4}); err == nil || !strings.Contains(err.Error(), "4 AMX passes") {
		t.Fatalf("4 AMX passes: %v", err)
	}
	t.Setenv("FT_HOST_AMX", "five")
	if _, err := NewEngine(Options{}); err == nil || !strings.Contains(err.Error(), `FT_HOST_AMX="five"`) {
		t.Fatalf("FT_HOST_AMX=five: %v", err)
	}
	for v, want := range map[string]int{"off": 0, "0": 0, "1": 1, "2": 2, "3": 3, "": DefaultAMXPasses} {
		t.Setenv("FT_HOST_AMX", v)
		e, err := NewEngine(Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		if !hasAMX() {
			want = 0
		}
		if got := e.AMXPasses(); got != want {
			t.Errorf("FT_HOST_AMX=%q: %d passes, want %d", v, got, want)
		}
		e.Close()
	}
	e, err := NewEngine(Options{Threads: 1, AMXPasses: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.AMXPasses() != 0 {
		t.Fatalf("AMXPasses −1 runs %d passes", e.AMXPasses())
	}
}

// BenchmarkAMXMatMul times many-token BF16 products with the SIMD tiles
// (passes 0) and the AMX ones at 1 and 3 passes; GFLOP/s counts 2·T·N·K.
func BenchmarkAMXMatMul(b *testing.B) {
	if !hasAMX() {
		b.Skip("no AMX tiles")
	}
	r := rand.New(rand.NewPCG(1, 1))
	for _, sh := range [][2]int{{512, 2048}, {2048, 2048}, {2048, 2080}, {8192, 2048}, {2048, 8192}} {
		n, k := sh[0], sh[1]
		w := randMat(r, runtime.BF16, n, k)
		for _, T := range []int{16, 64, 128, 512} {
			x := randF32(r, T*k)
			out := make([]float32, T*n)
			for _, p := range []int{-1, 1, 2, 3} {
				e, err := NewEngine(Options{AMXPasses: p})
				if err != nil {
					b.Fatal(err)
				}
				b.Run(fmt.Sprintf("%dx%d/T%d/passes%d", n, k, T, max(p, 0)), func(b *testing.B) {
					for b.Loop() {
						if err := e.MatMul(out, x, T, w); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(2*float64(T*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
				e.Close()
			}
		}
	}
}

// amxTranspose writes a [row][token] tile to nt token rows of an output
// with a row stride, setting or adding, and nothing past them.
func TestAMXTranspose(t *testing.T) {
	if !hasAMX() {
		t.Skip("no AMX tiles on this CPU or OS")
	}
	r := rand.New(rand.NewPCG(11, 12))
	src := randF32(r, 256)
	const ldo = 21
	for nt := 1; nt <= 16; nt++ {
		for acc := range 2 {
			dst := randF32(r, 17*ldo+16)
			was := slices.Clone(dst)
			amxTranspose(&dst[ldo+3], 4*ldo, &src[0], nt, acc, nil)
			for i := range dst {
				want := was[i]
				if tok, row := i/ldo-1, i%ldo-3; tok >= 0 && tok < nt && row >= 0 && row < 16 {
					if acc == 1 {
						want += src[row*16+tok]
					} else {
						want = src[row*16+tok]
					}
				}
				if dst[i] != want {
					t.Fatalf("nt %d acc %d: [%d] = %v, want %v", nt, acc, i, dst[i], want)
				}
			}
		}
	}
}

// siluMulAVX512 gives scalar siluMul's bits: random gates over the whole
// range expf handles and past it, the clamps' edges, values whose x·log2e
// lies near a half (where n's rounding decides), zeros and a NaN.
func TestSiLUMulAVX512Bits(t *testing.T) {
	if !hasLevel(AVX512) {
		t.Skip("no AVX-512")
	}
	r := rand.New(rand.NewPCG(13, 14))
	var g []float32
	for range 4096 {
		g = append(g, 200*r.Float32()-100, 2*r.Float32()-1, float32(r.NormFloat64()*4))
	}
	for _, v := range []float32{0, float32(math.Copysign(0, -1)), 88, -88, 87, -87, 88.0001, -87.0001, 1e-30, -1e-30, 1e30, -1e30, float32(math.NaN())} {
		g = append(g, v)
	}
	for k := -60; k <= 60; k++ { // x·log2e close to k + 1/2
		x := (float32(k) + 0.5) / 1.44269504088896341
		for _, d := range []float32{x, math.Nextafter32(x, 100), math.Nextafter32(x, -100)} {
			g = append(g, -d)
		}
	}
	for len(g)%16 != 0 {
		g = append(g, 1)
	}
	u := randF32(r, len(g))
	want := make([]float32, len(g))
	siluMulScalar(want, g, u)
	got := make([]float32, len(g))
	siluMulAVX512(&got[0], &g[0], &u[0], len(g)/16)
	for i := range g {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
			t.Fatalf("gate %v (bits %#x), up %v: %v, scalar %v", g[i], math.Float32bits(g[i]), u[i], got[i], want[i])
		}
	}
}

// expShiftAVX512 gives expf's bits for in − shift.
func TestExpShiftAVX512Bits(t *testing.T) {
	if !hasLevel(AVX512) {
		t.Skip("no AVX-512")
	}
	r := rand.New(rand.NewPCG(15, 16))
	in := make([]float32, 16*512)
	for i := range in {
		in[i] = 240*r.Float32() - 200
	}
	for _, shift := range []float32{0, 3.5, -40} {
		got := make([]float32, len(in))
		var sums [16]float32
		expShiftAVX512(&got[0], &in[0], shift, len(in)/16, &sums)
		var want16 [16]float32
		for i, v := range in {
			want := expf(v - shift)
			if math.Float32bits(got[i]) != math.Float32bits(want) {
				t.Fatalf("expf(%v − %v): %v, scalar %v", v, shift, got[i], want)
			}
			want16[i%16] += want
		}
		if sums != want16 {
			t.Fatalf("lane sums %v, want %v", sums, want16)
		}
	}
}

// expShift: the largest score exactly, each exponential with expf's bits,
// the sum within float32 rounding of the sequential one, at every length
// around the 16-lane blocks.
func TestExpShift(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	for n := 1; n <= 70; n++ {
		s := make([]float32, n)
		for i := range s {
			s[i] = 30*r.Float32() - 20
		}
		in := slices.Clone(s)
		mx, sum := expShift(s)
		if want := slices.Max(in); mx != want {
			t.Fatalf("n %d: max %v, want %v", n, mx, want)
		}
		var want float64
		for i, v := range in {
			e := expf(v - mx)
			if math.Float32bits(s[i]) != math.Float32bits(e) {
				t.Fatalf("n %d: [%d] = %v, want %v", n, i, s[i], e)
			}
			want += float64(e)
		}
		if math.Abs(float64(sum)-want) > 1e-6*want {
			t.Fatalf("n %d: sum %v, want %v", n, sum, want)
		}
	}
}

// amxPackAVX512 packs x as packGo does, bit for bit: every pass count,
// token blocks full and partial, NaN and values on rounding ties.
func TestAMXPackAVX512(t *testing.T) {
	if !hasAMX() {
		t.Skip("no AMX (the packing's AVX-512 comes with it)")
	}
	r := rand.New(rand.NewPCG(19, 20))
	const K = 96
	for _, T := range []int{16, 20, 37} {
		x := randF32(r, T*K)
		for i := range x {
			switch i % 97 {
			case 3:
				x[i] = float32(math.NaN())
			case 5:
				x[i] = math.Float32frombits(0x3f808000) // a tie: rounds to even
			case 7:
				x[i] = math.Float32frombits(0x3f818000) // a tie: rounds up
			case 11:
				x[i] *= 1e30
			case 13:
				x[i] = math.Float32frombits(0x7f800001) // a signalling NaN: made quiet
			}
		}
		for P := 1; P <= 3; P++ {
			j := &amxJob{x: x, T: T, K: K, P: P, ntb: (T + 15) / 16, ks: K / 32}
			n := j.ntb * 16 * K * P
			j.px = make([]uint16, n)
			units := j.ntb * j.ks
			j.packGo(0, 0, units)
			want := slices.Clone(j.px)
			for i := range j.px {
				j.px[i] = 0xdead
			}
			j.pack(0, 0, units)
			for i := range want {
				if j.px[i] != want[i] {
					t.Fatalf("T %d, %d passes: value %d = %#x, Go %#x", T, P, i, j.px[i], want[i])
				}
			}
		}
	}
}

// fp8ToBF16AVX512 widens every E4M3 code to its exact value as a bf16
// (the NaN codes to ±480, as the SIMD tiles read them).
func TestFP8ToBF16AVX512(t *testing.T) {
	if !hasAMX() {
		t.Skip("no AMX (the conversion's AVX-512 BW comes with it)")
	}
	src := make([]uint8, 256)
	for i := range src {
		src[i] = uint8(i)
	}
	dst := make([]uint16, 256)
	fp8ToBF16AVX512(&dst[0], &src[0], 256/32)
	for c := range 256 {
		want := runtime.F8E4M3ToF32(uint8(c))
		if c&0x7f == 0x7f {
			want = 480
			if c&0x80 != 0 {
				want = -480
			}
		}
		if got := bf16Val(dst[c]); got != want || math.Signbit(float64(got)) != math.Signbit(float64(want)) {
			t.Fatalf("code %#x: %v (bits %#x), want %v", c, got, dst[c], want)
		}
	}
}

// amxTranspose with row scales multiplies each row's sums by its scale.
func TestAMXTransposeScaled(t *testing.T) {
	if !hasAMX() {
		t.Skip("no AMX tiles on this CPU or OS")
	}
	r := rand.New(rand.NewPCG(21, 22))
	src, scale := randF32(r, 256), randF32(r, 16)
	dst := make([]float32, 16*16)
	amxTranspose(&dst[0], 64, &src[0], 16, 0, &scale[0])
	for tok := range 16 {
		for row := range 16 {
			if got, want := dst[tok*16+row], src[row*16+tok]*scale[row]; got != want {
				t.Fatalf("token %d row %d: %v, want %v", tok, row, got, want)
			}
		}
	}
}

// FP8 E4M3 weights with a scale a row take the tiles (widened exactly to
// bf16, the scales applied to the sums) within the tolerance of the
// reference's MatMulQ; block-scaled ones stay on the SIMD tiles, as
// correct.
func TestAMXMatMulQEqualsReference(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	for _, e := range amxEngines(t, 2, 3) {
		for _, sh := range [][3]int{{64, 96, 0}, {70, 64, 0}, {96, 32 * (amxKSteps + 3), 0}, {64, 256, 128}} {
			n, k, block := sh[0], sh[1], sh[2]
			w := randQMat(r, n, k, block)
			wf := dequant(w)
			for _, T := range []int{16, 33} {
				name := fmt.Sprintf("%d passes/%d threads/%dx%d block %d/T%d", e.AMXPasses(), e.Threads(), n, k, block, T)
				x := randF32(r, T*k)
				want := make([]float32, T*n)
				if err := kernels.MatMulQ(want, x, T, w); err != nil {
					t.Fatal(err)
				}
				got := make([]float32, T*n)
				if err := e.MatMulQ(got, x, T, w); err != nil {
					t.Fatal(err)
				}
				checkTol(t, name, got, want, magnitude(wf, x, T, n, k))
			}
		}
	}
}
