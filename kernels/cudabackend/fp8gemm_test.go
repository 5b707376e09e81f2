//go:build cuda

package cudabackend

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// needFP8TensorCores skips t on a GPU before sm_89 (no FP8 tensor cores:
// MatMulFP8 dequantizes there, which TestMatMulFP8 covers).
func needFP8TensorCores(t *testing.T) {
	t.Helper()
	needGPU(t)
	if cc := gdev.ComputeCapability(); cc < 89 {
		t.Skipf("%s is sm_%d: no FP8 tensor cores", gdev.Name(), cc)
	}
}

// TestQuantRowsE4M3: the per-token quantization kernel gives, bit for bit,
// kernels.QuantizeRowFP8's codes and scales: random rows of several
// magnitudes, a zero row (scale 1), a row of subnormal-range values next to
// one large one, rows whose values round up to the ±448 saturation and a
// row with NaNs of both signs (the hardware conversion's NaN goes through
// the software one); rows of 4144 values (held in registers) and of 20488
// (beyond the 16384 held: the rest re-read). The blocks after the rows
// convert three BF16 scale vectors to fp32 exactly.
func TestQuantRowsE4M3(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, D := range []int{4096 + 48, 20480 + 8} {
		t.Run(fmt.Sprintf("D%d", D), func(t *testing.T) {
			const T = 8
			x := make([]float32, T*D)
			for r := 0; r < T; r++ {
				row := x[r*D : (r+1)*D]
				switch r {
				case 0: // zero row
				case 1: // tiny values (E4M3 subnormals after scaling) and one large one
					copy(row, randBF16(rng, D, 1e-3))
					row[17] = 7
				case 2: // values just below the maximum: some round to 448
					for i := range row {
						row[i] = runtime.BF16ToF32(runtime.F32ToBF16(float32(447+rng.Float64()) * float32(1-2*(i%2))))
					}
				case 3: // NaNs of both signs among ordinary values
					copy(row, randBF16(rng, D, 3))
					row[5] = runtime.BF16ToF32(runtime.F32ToBF16(float32(math.NaN())))
					row[D-3] = runtime.BF16ToF32(runtime.F32ToBF16(math.Float32frombits(0xffc00000)))
				default:
					copy(row, randBF16(rng, D, float32(math.Pow(10, float64(r-5)))))
				}
			}
			ns := [3]int{1024, 48, 4096}
			var sv [3][]float32
			var sg [3]*runtime.Tensor
			for i, n := range ns {
				sv[i] = randBF16(rng, n, 1e-3)
				sg[i] = gpu(t, runtime.BF16, sv[i], n, 1)
			}
			gx := gpu(t, runtime.BF16, x, T, D)
			q := gpu(t, runtime.F8E4M3, nil, T, D)
			s := gpu(t, runtime.F32, nil, T)
			wsf := poisoned(t, runtime.F32, ns[0]+ns[1]+ns[2])
			if err := gb.k.fp8gemm.quant.Launch(gb.s, cuda.Dim3{X: T + 5}, cuda.Dim3{X: 256}, 0,
				cuda.Ptr(q.Ptr()), cuda.Ptr(s.Ptr()), cuda.Ptr(gx.Ptr()), cuda.I32(T), cuda.I32(D), cuda.Ptr(wsf.Ptr()),
				cuda.Ptr(sg[0].Ptr()), cuda.Ptr(sg[1].Ptr()), cuda.Ptr(sg[2].Ptr()), cuda.I32(int(runtime.BF16)),
				cuda.I32(ns[0]), cuda.I32(ns[1]), cuda.I32(ns[2])); err != nil {
				t.Fatal(err)
			}
			gotQ := make([]byte, T*D)
			if err := gb.ReadBytes(gotQ, q); err != nil {
				t.Fatal(err)
			}
			gotS := read(t, s)
			wantQ := make([]byte, D)
			for r := 0; r < T; r++ {
				var ws float32
				kernels.QuantizeRowFP8(wantQ, x[r*D:(r+1)*D], &ws)
				if math.Float32bits(gotS[r]) != math.Float32bits(ws) {
					t.Errorf("row %d: scale %v, want %v", r, gotS[r], ws)
				}
				bad := 0
				for c, w := range wantQ {
					// E4M3 NaN is 0x7f or 0xff; a NaN's sign carries nothing
					// (the H200 gave 0x7f for a negative NaN, 2026-12-01).
					if g := gotQ[r*D+c]; g != w && !(g&0x7f == 0x7f && w&0x7f == 0x7f) {
						if bad < 3 {
							t.Errorf("row %d col %d: x %v → code %#02x, want %#02x", r, c, x[r*D+c], g, w)
						}
						bad++
					}
				}
				if bad > 0 {
					t.Errorf("row %d: %d of %d codes differ", r, bad, D)
				}
			}
			got := read(t, wsf)
			want := append(append(slices.Clone(sv[0]), sv[1]...), sv[2]...)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("converted scale %d = %v, want %v", i, got[i], want[i])
				}
			}
		})
	}
}

// fp8Case makes a random per-channel FP8 weight [N,D] (codes and scales of
// about 1/(448·√D), as TestMatMulFP8) on both devices, with the scales in
// sdt.
func fp8Case(t *testing.T, N, D int, sdt runtime.DType) (gw, gs, hw, hs *runtime.Tensor, qm kernels.QMat) {
	t.Helper()
	return fp8CaseRNG(t, newRNG(t), N, D, sdt)
}

// fp8CaseRNG is fp8Case drawing from rng (distinct weights in one test).
func fp8CaseRNG(t *testing.T, rng *rand.Rand, N, D int, sdt runtime.DType) (gw, gs, hw, hs *runtime.Tensor, qm kernels.QMat) {
	t.Helper()
	q := randFP8(rng, N*D)
	sv := make([]float32, N)
	for i := range sv {
		sv[i] = runtime.BF16ToF32(runtime.F32ToBF16(float32((0.5 + rng.Float64()) / (448 * math.Sqrt(float64(D))))))
	}
	sbytes := f32Bytes(sv)
	if sdt == runtime.BF16 {
		sbytes = bf16Bytes(sv)
	}
	gw, hw = rawTensors(t, runtime.F8E4M3, q, N, D)
	gs, hs = rawTensors(t, sdt, sbytes, N, 1)
	return gw, gs, hw, hs, kernels.QMat{DType: runtime.F8E4M3, Q: q, Scale: sv, Layout: kernels.FP8Layout{}, Rows: N, Cols: D}
}

// profiled runs fn under a kernel profile and returns the kernel names.
func profiled(t *testing.T, fn func() error) []string {
	t.Helper()
	if err := gdev.StartKernelProfile(); err != nil {
		t.Fatal(err)
	}
	ferr := fn()
	recs, err := gdev.StopKernelProfile()
	if ferr != nil {
		t.Fatal(ferr)
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range recs {
		names = append(names, r.Name)
	}
	return names
}

// TestMatMulFP8Lt: MatMulFP8 with per-channel scales and at least
// FP8GEMMMinTokens tokens runs the FP8 tensor-core path (checked in a
// kernel profile: quant_rows_e4m3 then, where cuBLASLt applies the scales —
// sm_90, cuBLASLt 12.9+ — "cublasLtMatmul fp8 scaled", else, and always
// with FP8LtRescale, cublasLtMatmul fp8 and fp8_rescale) and, on both
// paths, equals
// the CPU's W8A8 emulation (kernels.CPUBackend with FP8Activations: the
// activations quantized per token, times the dequantized weight, fp32 sums)
// on m ∈ {16, 17, 300}, n ∈ {1024, 4160}, k ∈ {4096, 14336}, BF16 and F32
// outputs, F32 and BF16 scales.
//
// Tolerance, per element, with r the CPU's value and A = Σ_k |x̂_k·ŵ_k| (x̂,
// ŵ the quantized activation and the dequantized weight; the CPU computes
// it with the codes' signs cleared): both sides multiply the same E4M3
// codes, whose products are exact in fp32, so they differ only by
//   - rounding the sums: the CPU in fp32 (K·2⁻²⁴·A at worst) and the H200's
//     FP8 tensor cores, whose partial sums keep about 14 mantissa bits
//     until cuBLASLt promotes them to fp32 (every few k-tiles of up to 128):
//     independent roundings of 2⁻¹⁴ relative on up to 128 sums, about
//     √128·2⁻¹⁴ = 2⁻¹⁰·⁵ of A, hence 2⁻¹⁰·A;
//   - the scales: the CPU applies them before the sum (x̂ = q·s in fp32),
//     the GPU after (two more fp32 roundings, 2⁻²³·|r|), and a BF16 output
//     is rounded twice (the GEMM's, then the rescaled value's: 2·2⁻⁹·|r|),
//     hence 2⁻⁷·|r| for BF16 and 2⁻²⁰·|r| for F32.
//
// A wrong layout, transposition or scale moves an element by about |r|
// itself (|r| ≈ A/√K-ish for these random inputs, far above 2⁻¹⁰·A), and
// the RMS error must stay below 2⁻⁸ of the RMS value.
func TestMatMulFP8Lt(t *testing.T) {
	needFP8TensorCores(t)
	w8a8, err := kernels.NewCPUBackend(cpu)
	if err != nil {
		t.Fatal(err)
	}
	w8a8.FP8Activations = true
	if gb.FP8GEMM != FP8GEMMLt {
		t.Fatalf("the backend's FP8GEMM is %v (FT_FP8_GEMM set?); this test needs lt", gb.FP8GEMM)
	}
	outerErr := gb.blas.FP8OuterScales()
	t.Logf("outer-vector scales in cuBLASLt: %v", outerErr)
	defer func(r bool) { gb.FP8LtRescale = r }(gb.FP8LtRescale)
	for _, rescale := range []bool{false, true} {
		gb.FP8LtRescale = rescale
		for _, n := range []int{1024, 4096 + 64} {
			for _, k := range []int{4096, 14336} {
				sdt := runtime.F32
				if n == 1024 {
					sdt = runtime.BF16
				}
				gw, gs, hw, hs, qm := fp8Case(t, n, k, sdt)
				absW := qm
				absW.Q = slices.Clone(qm.Q)
				for i := range absW.Q {
					absW.Q[i] &^= 0x80
				}
				for _, m := range []int{16, 17, 300} {
					odt := runtime.BF16
					if m == 17 {
						odt = runtime.F32
					}
					t.Run(fmt.Sprintf("rescale%v_m%d_n%d_k%d_out%v_scale%v", rescale, m, n, k, odt, sdt), func(t *testing.T) {
						rng := newRNG(t)
						x := randBF16(rng, m*k, 2)
						for i := 0; i < m; i++ { // rows of different magnitudes
							for j := range k {
								x[i*k+j] = runtime.BF16ToF32(runtime.F32ToBF16(x[i*k+j] * float32(math.Pow(2, float64(i%7-3)))))
							}
						}
						out := poisoned(t, odt, m, n)
						gx := gpu(t, runtime.BF16, x, m, k)
						names := profiled(t, func() error { return gb.MatMulFP8(out, gx, gw, gs, kernels.FP8Layout{}) })
						want := []string{"quant_rows_e4m3", fmt.Sprintf("cublasLtMatmul fp8[m=%d,n=%d,k=%d]", m, n, k), "fp8_rescale"}
						if !rescale && outerErr == nil {
							scaled := []string{"quant_rows_e4m3", fmt.Sprintf("cublasLtMatmul fp8 scaled[m=%d,n=%d,k=%d]", m, n, k)}
							// cuBLASLt may refuse the outer-vector scales for a
							// shape (13.1 on the H200 refused every one, status
							// 7, until the plans set stand-in scale vectors
							// before the heuristic): then the rescale kernel
							// must run.
							if r := gb.FP8GEMMRescaleReason(); slices.Equal(names, want) && errors.Is(r, cuda.ErrFP8Unsupported) {
								t.Logf("cuBLASLt refused the outer-vector scales: %v", r)
							} else {
								want = scaled
							}
						}
						if !slices.Equal(names, want) {
							t.Fatalf("kernels %v, want %v (fallback: %v; rescale reason: %v)", names, want, gb.FP8GEMMFallback(), gb.FP8GEMMRescaleReason())
						}
						ref := host(t, runtime.F32, nil, m, n)
						if err := w8a8.MatMulFP8(ref, host(t, runtime.F32, x, m, k), hw, hs, kernels.FP8Layout{}); err != nil {
							t.Fatal(err)
						}
						xq := make([]float32, len(x))
						kernels.QuantizeRowsF32(xq, x, k)
						for i := range xq {
							xq[i] = float32(math.Abs(float64(xq[i])))
						}
						abs := make([]float32, m*n)
						if err := kernels.MatMulQ(abs, xq, m, absW); err != nil {
							t.Fatal(err)
						}
						rel := math.Pow(2, -7)
						if odt == runtime.F32 {
							rel = math.Pow(2, -20)
						}
						got, r := read(t, out), ref.F32()
						bad := 0
						var se, sr, worst float64
						for i := range got {
							g, w := float64(got[i]), float64(r[i])
							d := math.Abs(g - w)
							tol := rel*math.Abs(w) + math.Pow(2, -10)*float64(abs[i])
							if !(d <= tol) {
								if bad < 5 {
									t.Errorf("element [%d,%d] = %v, want %v (|diff| %.3g > %.3g; Σ|terms| %.3g)", i/n, i%n, g, w, d, tol, abs[i])
								}
								bad++
							}
							se += d * d
							sr += w * w
							worst = max(worst, d/max(float64(abs[i]), 1e-30))
						}
						if bad > 0 {
							t.Errorf("%d of %d elements out of tolerance", bad, len(got))
						}
						rms := math.Sqrt(se / max(sr, 1e-30))
						if !(rms <= math.Pow(2, -8)) {
							t.Errorf("RMS error %.3g of the RMS value, want ≤ 2⁻⁸", rms)
						}
						t.Logf("%d elements, RMS error %.3g of the RMS value, worst |diff|/Σ|terms| %.3g", len(got), rms, worst)
					})
				}
			}
		}
	}
}

// TestMatMulFP8LtFast: fast accumulation (partial sums never promoted to
// fp32) is coarser, so it is held to the RMS bound only: its RMS error
// within 2⁻⁶ of the RMS value of the CPU's W8A8 result (a wrong layout or
// scale is about 1.4).
func TestMatMulFP8LtFast(t *testing.T) {
	needFP8TensorCores(t)
	w8a8, err := kernels.NewCPUBackend(cpu)
	if err != nil {
		t.Fatal(err)
	}
	w8a8.FP8Activations = true
	defer func(m FP8GEMMMode) { gb.FP8GEMM = m }(gb.FP8GEMM)
	gb.FP8GEMM = FP8GEMMLtFast
	const m, n, k = 64, 4096, 4096
	gw, gs, hw, hs, _ := fp8Case(t, n, k, runtime.F32)
	x := randBF16(newRNG(t), m*k, 1)
	out := poisoned(t, runtime.BF16, m, n)
	gx := gpu(t, runtime.BF16, x, m, k)
	names := profiled(t, func() error { return gb.MatMulFP8(out, gx, gw, gs, kernels.FP8Layout{}) })
	if !slices.ContainsFunc(names, func(s string) bool { return strings.HasPrefix(s, "cublasLtMatmul fp8") }) {
		t.Fatalf("kernels %v: no cuBLASLt FP8 GEMM (fallback: %v)", names, gb.FP8GEMMFallback())
	}
	ref := host(t, runtime.F32, nil, m, n)
	if err := w8a8.MatMulFP8(ref, host(t, runtime.F32, x, m, k), hw, hs, kernels.FP8Layout{}); err != nil {
		t.Fatal(err)
	}
	got, r := read(t, out), ref.F32()
	var se, sr float64
	for i := range got {
		d := float64(got[i]) - float64(r[i])
		se += d * d
		sr += float64(r[i]) * float64(r[i])
	}
	if rms := math.Sqrt(se / sr); !(rms <= math.Pow(2, -6)) {
		t.Errorf("RMS error %.3g of the RMS value, want ≤ 2⁻⁶", rms)
	} else {
		t.Logf("RMS error %.3g of the RMS value", rms)
	}
}

// TestMatMulFP8LtChoice: which MatMulFP8s take the FP8 GEMM: not below
// FP8GEMMMinTokens, not with FT_FP8_GEMM=dequant (FP8GEMMDequant), not
// for block scales, not when D is not a multiple of 16 — those
// dequantize (dequant_fp8_bf16 + cuBLAS) and still match the W8A16 CPU
// reference.
func TestMatMulFP8LtChoice(t *testing.T) {
	needFP8TensorCores(t)
	defer func(m FP8GEMMMode, n int) { gb.FP8GEMM, gb.FP8GEMMMinTokens = m, n }(gb.FP8GEMM, gb.FP8GEMMMinTokens)
	rng := newRNG(t)
	for _, c := range []struct {
		name         string
		mode         FP8GEMMMode
		minTok, T, D int
		block        int
		lt           bool
	}{
		{"lt", FP8GEMMLt, 0, 16, 256, 0, true},
		{"below min tokens", FP8GEMMLt, 0, 15, 256, 0, false},
		{"min tokens 4", FP8GEMMLt, 4, 4, 256, 0, true},
		{"dequant mode", FP8GEMMDequant, 0, 64, 256, 0, false},
		{"block scales", FP8GEMMLt, 0, 64, 256, 128, false},
		{"D % 16 != 0", FP8GEMMLt, 0, 64, 264, 0, false},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			gb.FP8GEMM, gb.FP8GEMMMinTokens = c.mode, c.minTok
			const N = 512
			layout := kernels.FP8Layout{Block: c.block}
			q := randFP8(rng, N*c.D)
			ss := layout.ScaleShape(N, c.D)
			sv := make([]float32, ss.NumElements())
			for i := range sv {
				sv[i] = float32(0.5+rng.Float64()) / (448 * float32(math.Sqrt(float64(c.D))))
			}
			gw, hw := rawTensors(t, runtime.F8E4M3, q, N, c.D)
			gs, hs := rawTensors(t, runtime.F32, f32Bytes(sv), ss...)
			x := randBF16(rng, c.T*c.D, 1)
			out := poisoned(t, runtime.BF16, c.T, N)
			gx := gpu(t, runtime.BF16, x, c.T, c.D)
			names := profiled(t, func() error { return gb.MatMulFP8(out, gx, gw, gs, layout) })
			if lt := slices.ContainsFunc(names, func(s string) bool { return strings.HasPrefix(s, "cublasLtMatmul fp8") }); lt != c.lt {
				t.Fatalf("kernels %v: FP8 GEMM ran %v, want %v (fallback: %v)", names, lt, c.lt, gb.FP8GEMMFallback())
			}
			ref := host(t, runtime.F32, nil, c.T, N)
			ref8, err := kernels.NewCPUBackend(cpu)
			if err != nil {
				t.Fatal(err)
			}
			// W8A8 against the CPU's emulation: TestMatMulFP8Lt's bound, with
			// Σ|terms| ≤ √D·(RMS output ≈ 0.6)·~2 ≈ 20 for D = 256, so 2⁻¹⁰·20;
			// W8A16 as TestMatMulFP8.
			atol, rtol := 3e-3, 8e-3
			if c.lt {
				ref8.FP8Activations = true
				atol, rtol = 2e-2, 1.0/128
			}
			if err := ref8.MatMulFP8(ref, host(t, runtime.F32, x, c.T, c.D), hw, hs, layout); err != nil {
				t.Fatal(err)
			}
			compare(t, "MatMulFP8", read(t, out), ref.F32(), atol, rtol)
		})
	}
}

// TestFP8GEMMModeEnv: FT_FP8_GEMM's values and a bad one.
func TestFP8GEMMModeEnv(t *testing.T) {
	for s, want := range map[string]FP8GEMMMode{"": FP8GEMMLt, "lt": FP8GEMMLt, "lt-fast": FP8GEMMLtFast, "dequant": FP8GEMMDequant} {
		got, err := ParseFP8GEMMMode(s)
		if err != nil || got != want {
			t.Errorf("ParseFP8GEMMMode(%q) = %v, %v; want %v", s, got, err, want)
		}
		if s != "" && got.String() != s {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), s)
		}
	}
	if _, err := ParseFP8GEMMMode("fp8"); err == nil || !strings.Contains(err.Error(), "FT_FP8_GEMM") {
		t.Errorf("ParseFP8GEMMMode(fp8): %v, want an error naming FT_FP8_GEMM", err)
	}
	t.Setenv("FT_FP8_GEMM", "dequant")
	t.Setenv("FT_FP8_GEMM_MIN_TOKENS", "1")
	if _, _, err := fp8GemmFromEnv(); err == nil || !strings.Contains(err.Error(), "FT_FP8_GEMM_MIN_TOKENS") {
		t.Errorf("FT_FP8_GEMM_MIN_TOKENS=1: %v, want an error naming it", err)
	}
	t.Setenv("FT_FP8_GEMM_MIN_TOKENS", "32")
	if m, n, err := fp8GemmFromEnv(); err != nil || m != FP8GEMMDequant || n != 32 {
		t.Errorf("fp8GemmFromEnv() = %v, %d, %v; want dequant, 32", m, n, err)
	}
}
