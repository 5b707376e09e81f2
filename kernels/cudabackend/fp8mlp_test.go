//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// nearTie reports whether E4M3 codes got and want of v (divided by its row
// scale) differ only because v lies within rel of the midpoint between two
// neighbouring codes.
func nearTie(got, want uint8, v float32, rel float64) bool {
	if got == want {
		return true
	}
	if got&0x80 != want&0x80 || (int(got&0x7f)-int(want&0x7f))*(int(got&0x7f)-int(want&0x7f)) != 1 {
		return false
	}
	tab := runtime.F8E4M3Table()
	mid := (math.Abs(float64(tab[got])) + math.Abs(float64(tab[want]))) / 2
	return math.Abs(math.Abs(float64(v))-mid) <= rel*mid
}

// siluQuantRef is fp8_silu_quant_rows's arithmetic in Go (that of
// kernels.SiLUQuantRowsFP8): h before quantization, and the codes and row
// scales through kernels.SiLUQuantRowsFP8.
func siluQuantRef(t *testing.T, g, u, xs, sg, su []float32, T, I int) (h []float32, q []uint8, hs []float32) {
	t.Helper()
	h = make([]float32, T*I)
	for r := range T {
		for c := range I {
			gv, uv := g[r*I+c]*(xs[r]*sg[c]), u[r*I+c]*(xs[r]*su[c])
			h[r*I+c] = gv / (1 + float32(math.Exp(float64(-gv)))) * uv
		}
	}
	q, hs = make([]uint8, T*I), make([]float32, T)
	if err := kernels.SiLUQuantRowsFP8(q, hs, g, u, xs, sg, su, I); err != nil {
		t.Fatal(err)
	}
	return h, q, hs
}

// checkCodes compares the GPU's codes and row scales of h with the Go
// reference's: scales within 1e-5 relative (expf against math.Exp, a few
// ulps of h), codes equal except one step apart where h/scale lies within
// 1e-5 of a rounding midpoint.
func checkCodes(t *testing.T, gotQ []byte, gotS []float32, h []float32, q []uint8, hs []float32, T, I int) {
	t.Helper()
	ties := 0
	for r := range T {
		if d := math.Abs(float64(gotS[r]-hs[r])) / float64(hs[r]); d > 1e-5 {
			t.Errorf("row %d: scale %v, want %v", r, gotS[r], hs[r])
		}
		bad := 0
		for c := range I {
			i := r*I + c
			if gotQ[i] == q[i] {
				continue
			}
			if nearTie(gotQ[i], q[i], h[i]/hs[r], 1e-5) {
				ties++
				continue
			}
			if bad < 3 {
				t.Errorf("row %d col %d: code %#02x, want %#02x (h %v, scale %v)", r, c, gotQ[i], q[i], h[i], hs[r])
			}
			bad++
		}
		if bad > 0 {
			t.Errorf("row %d: %d of %d codes differ", r, bad, I)
		}
	}
	t.Logf("%d of %d codes one step apart at a rounding midpoint", ties, T*I)
}

// TestFP8SiLUQuantRows: fp8_silu_quant_rows gives the codes and row scales
// of kernels.SiLUQuantRowsFP8 (the scales applied to the unscaled bf16
// gate and up products in fp32, silu·up in fp32, then quantized per row),
// up to expf against Go's math.Exp (see checkCodes): channel scales in
// BF16, F16 and F32; rows of 4160 values (held in registers) and of 20488
// (beyond the 16384 held: recomputed); a zero row (scale 1), a row of tiny
// values and rows of several magnitudes.
func TestFP8SiLUQuantRows(t *testing.T) {
	needGPU(t)
	for _, I := range []int{4096 + 64, 20480 + 8} {
		for _, sdt := range []runtime.DType{runtime.BF16, runtime.F16, runtime.F32} {
			t.Run(fmt.Sprintf("I%d_%v", I, sdt), func(t *testing.T) {
				rng := newRNG(t)
				const T = 6
				g, u := randBF16(rng, T*I, 3e4), randBF16(rng, T*I, 3e4)
				for c := range I {
					g[c], u[c] = 0, 0 // row 0: h = 0
					g[I+c], u[I+c] = runtime.BF16ToF32(runtime.F32ToBF16(g[I+c]*1e-6)), runtime.BF16ToF32(runtime.F32ToBF16(u[I+c]*1e-3))
				}
				xs := make([]float32, T)
				for r := range xs {
					xs[r] = float32(math.Exp2(float64(r-8))) * (0.75 + 0.5*rng.Float32())
				}
				// Channel scales exact in BF16 and F16 alike.
				sg, su := randBF16(rng, I, 8e-3), randBF16(rng, I, 8e-3)
				for c := range I {
					sg[c], su[c] = float32(math.Abs(float64(sg[c])))+1e-3, float32(math.Abs(float64(su[c])))+1e-3
					sg[c], su[c] = runtime.BF16ToF32(runtime.F32ToBF16(sg[c])), runtime.BF16ToF32(runtime.F32ToBF16(su[c]))
				}
				gg, gu := gpu(t, runtime.BF16, g, T, I), gpu(t, runtime.BF16, u, T, I)
				gxs := gpu(t, runtime.F32, xs, T)
				gsg, gsu := gpu(t, sdt, sg, I), gpu(t, sdt, su, I)
				q := gpu(t, runtime.F8E4M3, nil, T, I)
				hs := poisoned(t, runtime.F32, T)
				if err := gb.k.fp8gemm.siluQuant.Launch(gb.s, cuda.Dim3{X: T}, cuda.Dim3{X: 256}, 0,
					cuda.Ptr(q.Ptr()), cuda.Ptr(hs.Ptr()), cuda.Ptr(gg.Ptr()), cuda.Ptr(gu.Ptr()), cuda.Ptr(gxs.Ptr()),
					cuda.Ptr(gsg.Ptr()), cuda.Ptr(gsu.Ptr()), cuda.I32(int(sdt)), cuda.I32(T), cuda.I32(I)); err != nil {
					t.Fatal(err)
				}
				gotQ := make([]byte, T*I)
				if err := gb.ReadBytes(gotQ, q); err != nil {
					t.Fatal(err)
				}
				h, wq, ws := siluQuantRef(t, g, u, xs, sg, su, T, I)
				gotS := read(t, hs)
				if gotS[0] != 1 {
					t.Errorf("zero row: scale %v, want 1", gotS[0])
				}
				checkCodes(t, gotQ, gotS, h, wq, ws, T, I)
			})
		}
	}
}

// TestMLPFP8: the fused FP8 MLP (MLPFP8 with FusesFP8MLP true) runs
// exactly quant_rows_e4m3, the gate and up FP8 GEMMs, fp8_silu_quant_rows,
// the down FP8 GEMM and fp8_rescale (fp8_rescale_add with add), for y BF16,
// y F32 and y += (add) over T ∈ {64, 37} rows, and is checked three ways:
//
//  1. its own order: the gate and up products it leaves in g and u, run
//     through kernels.SiLUQuantRowsFP8 with x's token scales (quant_rows_e4m3
//     is QuantizeRowFP8 bit for bit, TestQuantRowsE4M3), give the codes
//     and scales it left in the scratch (checkCodes' allowance), and y is
//     those codes dequantized times the down weight within
//     TestMatMulFP8Lt's bound (2⁻¹⁰·A + 2⁻⁷·|r| for a BF16 y, 2⁻²⁰·|r| for
//     F32, A = Σ|ĥ·ŵ|; plus 2⁻²²·|y| for the add's rounding);
//  2. against the unfused path (NoFP8Fuse: GateUpSiLUFP8 then MatMulFP8,
//     then Add) and
//  3. against the CPU's W8A8 emulation (kernels.CPUBackend with
//     FP8Activations: GateUpSiLUFP8, MatMulFP8 quantizing h per row, Add):
//     these round h differently before it is quantized (the unfused path
//     to bf16 three times, the CPU not at all but with its own sums), so
//     an E4M3 code of h moves one step (up to 2⁻³ of its value) where h
//     sits near a rounding boundary. With h's relative differences of
//     about 2⁻⁸, about one code in 2⁴ moves; each move shifts an output by
//     ≤ 2⁻³·|ĥ·ŵ|, so the RMS difference is about 2⁻²·2⁻⁴ = 2⁻⁶ of the
//     RMS output (random signs): required ≤ 2⁻⁴ of it, and every element
//     within 2⁻²·A (all codes of a row moving would take 2⁻³·A). A wrong
//     scale, layout or row moves the RMS difference to about the RMS
//     output itself.
func TestMLPFP8(t *testing.T) {
	needFP8TensorCores(t)
	if !gb.FusesFP8MLP(64, kernels.FP8Layout{}) || gb.FusesFP8MLP(1, kernels.FP8Layout{}) || gb.FusesFP8MLP(64, kernels.FP8Layout{Block: 128}) {
		t.Fatalf("FusesFP8MLP: 64 rows %v, one row %v, block scales %v; want true, false, false (FT_FP8_FUSE=0 or FT_FP8_GEMM set?)",
			gb.FusesFP8MLP(64, kernels.FP8Layout{}), gb.FusesFP8MLP(1, kernels.FP8Layout{}), gb.FusesFP8MLP(64, kernels.FP8Layout{Block: 128}))
	}
	w8a8, err := kernels.NewCPUBackend(cpu)
	if err != nil {
		t.Fatal(err)
	}
	w8a8.FP8Activations = true
	defer func(f bool) { gb.NoFP8Fuse = f }(gb.NoFP8Fuse)
	tab := runtime.F8E4M3Table()
	for _, c := range []struct{ T, D, I int }{{64, 256, 512}, {37, 128, 320}} {
		rng := newRNG(t)
		T, D, I := c.T, c.D, c.I
		gw, gs, hgw, hgs, _ := fp8CaseRNG(t, rng, I, D, runtime.BF16)
		uw, us, huw, hus, _ := fp8CaseRNG(t, rng, I, D, runtime.BF16)
		dw, ds, hdw, hds, dq := fp8CaseRNG(t, rng, D, I, runtime.F32)
		m := kernels.FP8MLP{Gate: gw, Up: uw, Down: dw, GateScale: gs, UpScale: us, DownScale: ds}
		absD := dq
		absD.Q = slices.Clone(dq.Q)
		for i := range absD.Q {
			absD.Q[i] &^= 0x80
		}
		x := randBF16(rng, T*D, 2)
		for r := range T { // rows of different magnitudes
			for j := range D {
				x[r*D+j] = runtime.BF16ToF32(runtime.F32ToBF16(x[r*D+j] * float32(math.Exp2(float64(r%7-3)))))
			}
		}
		gx := gpu(t, runtime.BF16, x, T, D)
		// The CPU's W8A8 emulation of the MLP, with A = Σ|ĥ·ŵ| of its codes.
		hh, hu := host(t, runtime.F32, nil, T, I), host(t, runtime.F32, nil, T, I)
		if err := w8a8.GateUpSiLUFP8(hh, hu, host(t, runtime.F32, x, T, D), hgw, huw, hgs, hus, kernels.FP8Layout{}); err != nil {
			t.Fatal(err)
		}
		emul := host(t, runtime.F32, nil, T, D)
		if err := w8a8.MatMulFP8(emul, hh, hdw, hds, kernels.FP8Layout{}); err != nil {
			t.Fatal(err)
		}
		hq := make([]float32, T*I)
		kernels.QuantizeRowsF32(hq, hh.F32(), I)
		for i := range hq {
			hq[i] = float32(math.Abs(float64(hq[i])))
		}
		absEmul := make([]float32, T*D)
		if err := kernels.MatMulQ(absEmul, hq, T, absD); err != nil {
			t.Fatal(err)
		}
		for _, mode := range []string{"bf16", "f32", "add"} {
			t.Run(fmt.Sprintf("T%d_D%d_I%d_%s", T, D, I, mode), func(t *testing.T) {
				add := mode == "add"
				ydt := runtime.F32
				if mode == "bf16" {
					ydt = runtime.BF16
				}
				y0 := make([]float32, T*D)
				if add {
					y0 = randBF16(rng, T*D, 4)
				}
				run := func(noFuse bool) ([]float32, []string, *runtime.Tensor, *runtime.Tensor) {
					gb.NoFP8Fuse = noFuse
					y := poisoned(t, ydt, T, D)
					if add {
						y = gpu(t, runtime.F32, y0, T, D)
					}
					g, u := poisoned(t, runtime.BF16, T, I), poisoned(t, runtime.BF16, T, I)
					var tmp *runtime.Tensor
					if add {
						tmp = poisoned(t, runtime.F32, T, D)
					}
					names := profiled(t, func() error { return gb.MLPFP8(y, gx, g, u, tmp, m, add) })
					return read(t, y), names, g, u
				}
				got, names, g, u := run(false)
				rescale := "fp8_rescale"
				if add {
					rescale = "fp8_rescale_add"
				}
				wantNames := []string{"quant_rows_e4m3", fmt.Sprintf("cublasLtMatmul fp8[m=%d,n=%d,k=%d]", T, I, D),
					fmt.Sprintf("cublasLtMatmul fp8[m=%d,n=%d,k=%d]", T, I, D), "fp8_silu_quant_rows",
					fmt.Sprintf("cublasLtMatmul fp8[m=%d,n=%d,k=%d]", T, D, I), rescale}
				if !slices.Equal(names, wantNames) {
					t.Fatalf("kernels %v, want %v (fallback: %v)", names, wantNames, gb.FP8GEMMFallback())
				}

				// 1. Its own order.
				xs := make([]float32, T)
				qx := make([]byte, D)
				for r := range T {
					kernels.QuantizeRowFP8(qx, x[r*D:(r+1)*D], &xs[r])
				}
				sgv, suv := read(t, gs), read(t, us)
				h, wq, ws := siluQuantRef(t, read(t, g), read(t, u), xs, sgv, suv, T, I)
				buf := gb.fp8lt.buf
				codes := (int64(T)*int64(I) + 255) / 256 * 256
				qt, err := runtime.TensorOn(buf, fp8WScaleOffset(T, D), runtime.F8E4M3, runtime.Shape{T, I})
				if err != nil {
					t.Fatal(err)
				}
				st, err := runtime.TensorOn(buf, fp8WScaleOffset(T, D)+codes, runtime.F32, runtime.Shape{T})
				if err != nil {
					t.Fatal(err)
				}
				gotQ := make([]byte, T*I)
				if err := gb.ReadBytes(gotQ, qt); err != nil {
					t.Fatal(err)
				}
				gotS := read(t, st)
				checkCodes(t, gotQ, gotS, h, wq, ws, T, I)
				hdq, habs := make([]float32, T*I), make([]float32, T*I)
				for r := range T {
					for c := range I {
						hdq[r*I+c] = tab[gotQ[r*I+c]] * gotS[r]
						habs[r*I+c] = float32(math.Abs(float64(hdq[r*I+c])))
					}
				}
				prod, abs := make([]float32, T*D), make([]float32, T*D)
				if err := kernels.MatMulQ(prod, hdq, T, dq); err != nil {
					t.Fatal(err)
				}
				if err := kernels.MatMulQ(abs, habs, T, absD); err != nil {
					t.Fatal(err)
				}
				rel := math.Exp2(-20)
				if ydt == runtime.BF16 {
					rel = math.Exp2(-7)
				}
				bad := 0
				for i := range got {
					want := float64(y0[i]) + float64(prod[i])
					tol := math.Exp2(-10)*float64(abs[i]) + rel*math.Abs(float64(prod[i])) + math.Exp2(-22)*math.Abs(want)
					if d := math.Abs(float64(got[i]) - want); !(d <= tol) {
						if bad < 3 {
							t.Errorf("own order: element %d = %v, want %v (|diff| %.3g > %.3g)", i, got[i], want, d, tol)
						}
						bad++
					}
				}
				if bad > 0 {
					t.Errorf("own order: %d of %d elements out of tolerance", bad, len(got))
				}

				// 2 and 3: the unfused path and the CPU's emulation.
				unfused, unames, _, _ := run(true)
				if slices.Contains(unames, "fp8_silu_quant_rows") {
					t.Fatalf("NoFP8Fuse: kernels %v include the fused one", unames)
				}
				ev := emul.F32()
				for _, o := range []struct {
					what string
					ref  []float32
				}{{"unfused path", unfused}, {"CPU W8A8 emulation", nil}} {
					var se, sr float64
					bad := 0
					for i := range got {
						want := float64(y0[i]) + float64(ev[i])
						if o.ref != nil {
							want = float64(o.ref[i])
						}
						d := float64(got[i]) - want
						se += d * d
						sr += float64(ev[i]) * float64(ev[i])
						if !(math.Abs(d) <= 0.25*float64(absEmul[i])) {
							if bad < 3 {
								t.Errorf("%s: element %d = %v, want %v (|diff| %.3g > 2⁻²·A = %.3g)", o.what, i, got[i], want, math.Abs(d), 0.25*absEmul[i])
							}
							bad++
						}
					}
					rms := math.Sqrt(se / sr)
					t.Logf("%s: RMS difference %.3g of the RMS output", o.what, rms)
					if bad > 0 || !(rms <= 1.0/16) {
						t.Errorf("%s: %d elements beyond 2⁻²·A; RMS difference %.3g of the RMS output (want ≤ 2⁻⁴)", o.what, bad, rms)
					}
				}
			})
		}
	}
}
