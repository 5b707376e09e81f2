//go:build cuda

package cudabackend

import (
	"fmt"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestFP8RowsQuantizeOnce: MatMulNFP8 (q, k, v) and GateUpSiLUFP8 (gate, up)
// of 64 tokens quantize x once (one quant_rows_e4m3 in the kernel profile,
// one cuBLASLt FP8 GEMM per weight), with cuBLASLt's scales and with
// FP8LtRescale, and equal the CPU's W8A8 emulation (kernels.CPUBackend
// with FP8Activations: MatMulNFP8 one MatMulFP8 per weight, GateUpSiLUFP8
// gate, up, SiLUMul) within TestMatMulFP8LtChoice's bound for D = 256
// (2⁻¹⁰·Σ|terms| ≤ 2e-2, 2⁻⁷ relative; twice that after SiLU·up). The
// weights have BF16 scales but one F32 (used by cuBLASLt as it is).
// Below FP8GEMMMinTokens the backend says it does not fuse rows.
func TestFP8RowsQuantizeOnce(t *testing.T) {
	needFP8TensorCores(t)
	if !gb.FusesFP8Rows(64) || gb.FusesFP8Rows(DefaultFP8GEMMMinTokens-1) {
		t.Fatalf("FusesFP8Rows(64) = %v, FusesFP8Rows(%d) = %v; want true, false (FT_FP8_GEMM=%v)",
			gb.FusesFP8Rows(64), DefaultFP8GEMMMinTokens-1, gb.FusesFP8Rows(DefaultFP8GEMMMinTokens-1), gb.FP8GEMM)
	}
	w8a8, err := kernels.NewCPUBackend(cpu)
	if err != nil {
		t.Fatal(err)
	}
	w8a8.FP8Activations = true
	defer func(r bool) { gb.FP8LtRescale = r }(gb.FP8LtRescale)
	const T, D = 64, 256
	ns := []int{512, 128, 128}
	rng := newRNG(t)
	var gws, gss, hws, hss []*runtime.Tensor
	for i, n := range ns {
		sdt := runtime.BF16
		if i == 1 {
			sdt = runtime.F32
		}
		gw, gs, hw, hs, _ := fp8CaseRNG(t, rng, n, D, sdt)
		gws, gss, hws, hss = append(gws, gw), append(gss, gs), append(hws, hw), append(hss, hs)
	}
	gu, gus, hu, hus, _ := fp8CaseRNG(t, rng, ns[0], D, runtime.BF16) // up, beside gate = weight 0
	x := randBF16(rng, T*D, 1)
	gx, hx := gpu(t, runtime.BF16, x, T, D), host(t, runtime.F32, x, T, D)
	countGEMMs := func(names []string) (quant, gemms int) {
		for _, n := range names {
			switch {
			case n == "quant_rows_e4m3":
				quant++
			case strings.HasPrefix(n, "cublasLtMatmul fp8"):
				gemms++
			}
		}
		return quant, gemms
	}
	for _, rescale := range []bool{false, true} {
		gb.FP8LtRescale = rescale
		t.Run(fmt.Sprintf("MatMulNFP8_rescale%v", rescale), func(t *testing.T) {
			var gouts, houts []*runtime.Tensor
			for _, n := range ns {
				gouts = append(gouts, poisoned(t, runtime.BF16, T, n))
				houts = append(houts, host(t, runtime.F32, nil, T, n))
			}
			names := profiled(t, func() error { return gb.MatMulNFP8(gouts, gx, gws, gss, kernels.FP8Layout{}) })
			if q, g := countGEMMs(names); q != 1 || g != 3 {
				t.Fatalf("kernels %v: %d quantizations and %d FP8 GEMMs, want 1 and 3 (fallback: %v)", names, q, g, gb.FP8GEMMFallback())
			}
			if err := w8a8.MatMulNFP8(houts, hx, hws, hss, kernels.FP8Layout{}); err != nil {
				t.Fatal(err)
			}
			for i := range ns {
				compare(t, fmt.Sprintf("MatMulNFP8 out %d", i), read(t, gouts[i]), houts[i].F32(), 2e-2, 1.0/128)
			}
		})
		t.Run(fmt.Sprintf("GateUpSiLUFP8_rescale%v", rescale), func(t *testing.T) {
			out, up := poisoned(t, runtime.BF16, T, ns[0]), poisoned(t, runtime.BF16, T, ns[0])
			hout, hup := host(t, runtime.F32, nil, T, ns[0]), host(t, runtime.F32, nil, T, ns[0])
			names := profiled(t, func() error {
				return gb.GateUpSiLUFP8(out, up, gx, gws[0], gu, gss[0], gus, kernels.FP8Layout{})
			})
			if q, g := countGEMMs(names); q != 1 || g != 2 {
				t.Fatalf("kernels %v: %d quantizations and %d FP8 GEMMs, want 1 and 2 (fallback: %v)", names, q, g, gb.FP8GEMMFallback())
			}
			if err := w8a8.GateUpSiLUFP8(hout, hup, hx, hws[0], hu, hss[0], hus, kernels.FP8Layout{}); err != nil {
				t.Fatal(err)
			}
			compare(t, "GateUpSiLUFP8", read(t, out), hout.F32(), 4e-2, 2.0/128)
		})
	}
}
