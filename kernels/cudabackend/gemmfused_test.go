//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// withSwiGLU runs f with Backend.SwiGLUGEMM set to on.
func withSwiGLU(on bool, f func()) {
	old := gb.SwiGLUGEMM
	gb.SwiGLUGEMM = on
	defer func() { gb.SwiGLUGEMM = old }()
	f()
}

// withSwiGLUStore runs f with Backend.SwiGLUStore set to s.
func withSwiGLUStore(s SwiGLUStore, f func()) {
	old := gb.SwiGLUStore
	gb.SwiGLUStore = s
	defer func() { gb.SwiGLUStore = old }()
	f()
}

// swigluStores are the fused gate/up GEMM's epilogues.
var swigluStores = []SwiGLUStore{SwiGLUStoreRegs, SwiGLUStoreTMA}

// checkFusedKernels fails t unless the fused-epilogue GEMMs loaded on
// compute capability 9.0, each keeping its registers (no local memory).
func checkFusedKernels(t *testing.T) {
	t.Helper()
	m := gb.gemmFused()
	if m == nil {
		t.Fatalf("no fused-epilogue GEMMs on compute capability 9.0: %v", gb.fusedGEMM.err)
	}
	for _, f := range []*cuda.Function{m.swiglu, m.swigluTMA, m.qkv} {
		if regs, local, err := f.Resources(); err != nil || local != 0 {
			t.Errorf("%s: %d registers, %d bytes of local memory, error %v; want no local memory", f.Name(), regs, local, err)
		} else {
			t.Logf("%s: %d registers a thread at launch (setmaxnreg: 40 producer, 232 consumers)", f.Name(), regs)
		}
	}
}

// TestGateUpSiLUFusedGPU: the fused gate/up GEMM with silu·mul in its
// epilogue matches the CPU's fp32 reference and the separate GPU path
// (GEMM, GEMM, SiLUMul: gate and up rounded to bf16 before the silu·mul,
// hence twice mergedTol) over ragged row counts (a last tile with rows for
// one consumer only, one with none for either's second half), more tiles
// than blocks (the persistent loop, a partial group of the tile order) and
// Llama-3-8B's widths; the same bits when run twice, and from each of its
// epilogues' stores (SwiGLUStore). Calls it does not take
// (switched off, too few rows, I not a multiple of 128, D not of 64) write
// nothing; a wrong output size is an error. The kernel keeps its
// registers (no local memory). Off sm_90: never taken.
func TestGateUpSiLUFusedGPU(t *testing.T) {
	needGPU(t)
	if gdev.ComputeCapability() != 90 {
		x := gpu(t, runtime.BF16, make([]float32, 256*64), 256, 64)
		w := gpu(t, runtime.BF16, make([]float32, 128*64), 128, 64)
		var ran bool
		var err error
		withSwiGLU(true, func() { ran, err = gb.GateUpSiLUFused(poisoned(t, runtime.BF16, 256, 128), x, w, w) })
		if ran || err != nil {
			t.Fatalf("compute capability %d: ran %v, error %v; want not taken", gdev.ComputeCapability(), ran, err)
		}
		t.Skipf("compute capability %d: no wgmma", gdev.ComputeCapability())
	}
	checkFusedKernels(t)
	rng := newRNG(t)
	for _, c := range []struct {
		T, D, I int
		cpu     bool // also against the CPU (small enough)
	}{
		{256, 128, 128, true},
		{300, 192, 256, true},     // last row tile of 44 rows: consumer 1 has none
		{400, 64, 384, true},      // last row tile of 16 rows
		{2100, 512, 2048, true},   // 17 × 16 tiles: more than the blocks, a partial group
		{512, 4096, 14336, false}, // Llama-3-8B
		{4096, 4096, 14336, false},
	} {
		t.Run(fmt.Sprintf("T%d/D%d/I%d", c.T, c.D, c.I), func(t *testing.T) {
			x := randBF16(rng, c.T*c.D, 1)
			wgv := randBF16(rng, c.I*c.D, float32(2/math.Sqrt(float64(c.D))))
			wuv := randBF16(rng, c.I*c.D, float32(2/math.Sqrt(float64(c.D))))
			gx, wg, wu := gpu(t, runtime.BF16, x, c.T, c.D), gpu(t, runtime.BF16, wgv, c.I, c.D), gpu(t, runtime.BF16, wuv, c.I, c.D)
			out := poisoned(t, runtime.BF16, c.T, c.I)
			var ran bool
			var err error
			withSwiGLUStore(SwiGLUStoreRegs, func() {
				withSwiGLU(true, func() { ran, err = gb.GateUpSiLUFused(out, gx, wg, wu) })
			})
			if err != nil || !ran {
				t.Fatalf("ran %v, error %v", ran, err)
			}
			got := read(t, out)
			again := poisoned(t, runtime.BF16, c.T, c.I)
			withSwiGLUStore(SwiGLUStoreRegs, func() {
				withSwiGLU(true, func() { ran, err = gb.GateUpSiLUFused(again, gx, wg, wu) })
			})
			if err != nil || !ran {
				t.Fatalf("second run: ran %v, error %v", ran, err)
			}
			for i, v := range read(t, again) {
				if math.Float32bits(v) != math.Float32bits(got[i]) {
					t.Fatalf("second run: element %d is %v, first %v", i, v, got[i])
				}
			}
			for _, st := range swigluStores[1:] {
				// The output is the first T rows of T + 128: the rows past
				// it must stay unwritten (the TMA stores' bounds).
				whole := poisoned(t, runtime.BF16, c.T+128, c.I)
				other, err := whole.Slice(0, c.T)
				if err != nil {
					t.Fatal(err)
				}
				withSwiGLUStore(st, func() {
					withSwiGLU(true, func() { ran, err = gb.GateUpSiLUFused(other, gx, wg, wu) })
				})
				if err != nil || !ran {
					t.Fatalf("stores %v: ran %v, error %v", st, ran, err)
				}
				for i, v := range read(t, other) {
					if math.Float32bits(v) != math.Float32bits(got[i]) {
						t.Fatalf("stores %v: element %d (row %d) is %v, the register stores' %v", st, i, i/c.I, v, got[i])
					}
				}
				for i, v := range read(t, whole)[c.T*c.I:] {
					if !math.IsNaN(float64(v)) {
						t.Fatalf("stores %v: wrote element %d of the rows past the output", st, i)
					}
				}
			}
			g, u := poisoned(t, runtime.BF16, c.T, c.I), poisoned(t, runtime.BF16, c.T, c.I)
			if err := gb.MatMul(g, gx, wg); err != nil {
				t.Fatal(err)
			}
			if err := gb.MatMul(u, gx, wu); err != nil {
				t.Fatal(err)
			}
			if err := gb.SiLUMul(g, g, u); err != nil {
				t.Fatal(err)
			}
			compare(t, "against GEMM, GEMM, SiLUMul", got, read(t, g), 2*mergedTol, mergedTol)
			if c.cpu {
				hx := host(t, runtime.F32, x, c.T, c.D)
				rg, ru := host(t, runtime.F32, nil, c.T, c.I), host(t, runtime.F32, nil, c.T, c.I)
				if err := cb.MatMul(rg, hx, host(t, runtime.BF16, wgv, c.I, c.D)); err != nil {
					t.Fatal(err)
				}
				if err := cb.MatMul(ru, hx, host(t, runtime.BF16, wuv, c.I, c.D)); err != nil {
					t.Fatal(err)
				}
				if err := cb.SiLUMul(rg, rg, ru); err != nil {
					t.Fatal(err)
				}
				compare(t, "against the CPU", got, rg.F32(), mergedTol, mergedTol)
			}
		})
	}

	x := gpu(t, runtime.BF16, randBF16(rng, 512*128, 1), 512, 128)
	w := gpu(t, runtime.BF16, randBF16(rng, 256*128, 0.1), 256, 128)
	for _, c := range []struct {
		name       string
		on         bool
		x, wg, wu  *runtime.Tensor
		outT, outI int
	}{
		{"switched off", false, x, w, w, 512, 256},
		{"too few rows", true, gpu(t, runtime.BF16, make([]float32, 200*128), 200, 128), w, w, 200, 256},
		{"I not a multiple of 128", true, x, gpu(t, runtime.BF16, make([]float32, 192*128), 192, 128), gpu(t, runtime.BF16, make([]float32, 192*128), 192, 128), 512, 192},
		{"D not a multiple of 64", true, gpu(t, runtime.BF16, make([]float32, 512*96), 512, 96), gpu(t, runtime.BF16, make([]float32, 256*96), 256, 96), gpu(t, runtime.BF16, make([]float32, 256*96), 256, 96), 512, 256},
	} {
		out := poisoned(t, runtime.BF16, c.outT, c.outI)
		var ran bool
		var err error
		withSwiGLU(c.on, func() { ran, err = gb.GateUpSiLUFused(out, c.x, c.wg, c.wu) })
		if ran || err != nil {
			t.Errorf("%s: ran %v, error %v; want not taken", c.name, ran, err)
		}
		for i, v := range read(t, out) {
			if !math.IsNaN(float64(v)) {
				t.Fatalf("%s: a call not taken wrote output element %d", c.name, i)
			}
		}
	}
	var err error
	withSwiGLU(true, func() { _, err = gb.GateUpSiLUFused(poisoned(t, runtime.BF16, 512, 128), x, w, w) })
	if err == nil {
		t.Error("an output of 512 × 128 for 256 weight rows: no error")
	}
}

// BenchmarkGateUpSiLU times Llama-3-8B's gate, up and silu·mul (D 4,096,
// I 14,336) at 8,192 and 32,768 rows (prefill 8,192; 64 × 512): the fused
// GEMM (each of its epilogues' stores) against cuBLASLt's two GEMMs and
// the silu·mul kernel.
//
//	go test -tags cuda ./kernels/cudabackend -run '^$' -bench GateUpSiLU -benchtime 10x
func BenchmarkGateUpSiLU(b *testing.B) {
	if noGPU != nil {
		b.Skipf("no GPU: %v", noGPU)
	}
	if setupErr != nil {
		b.Fatal(setupErr)
	}
	const D, I = 4096, 14336
	tensor := func(shape ...int) *runtime.Tensor {
		t, err := runtime.NewTensor(gdev, runtime.BF16, shape, "gate/up bench")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(t.Buffer().Free)
		if err := gb.FillUniform(t, 7, -0.05, 0.05); err != nil {
			b.Fatal(err)
		}
		return t
	}
	wg, wu := tensor(I, D), tensor(I, D)
	for _, T := range []int{8192, 32768} {
		x, out, u := tensor(T, D), tensor(T, I), tensor(T, I)
		flops := 2 * 2 * float64(T) * D * I
		for _, st := range swigluStores {
			name := "fused"
			if st != SwiGLUStoreRegs {
				name += "-" + st.String()
			}
			b.Run(fmt.Sprintf("%s/%d", name, T), func(b *testing.B) {
				withSwiGLUStore(st, func() {
					withSwiGLU(true, func() {
						timeGPU(b, flops, 0, func() error {
							ran, err := gb.GateUpSiLUFused(out, x, wg, wu)
							if err == nil && !ran {
								err = fmt.Errorf("the fused GEMM did not run")
							}
							return err
						})
					})
				})
			})
		}
		b.Run(fmt.Sprintf("separate/%d", T), func(b *testing.B) {
			timeGPU(b, flops, 0, func() error {
				if err := gb.MatMul(out, x, wg); err != nil {
					return err
				}
				if err := gb.MatMul(u, x, wu); err != nil {
					return err
				}
				return gb.SiLUMul(out, out, u)
			})
		})
		b.Run(fmt.Sprintf("gemms/%d", T), func(b *testing.B) {
			timeGPU(b, flops, 0, func() error {
				if err := gb.MatMul(out, x, wg); err != nil {
					return err
				}
				return gb.MatMul(u, x, wu)
			})
		})
	}
}
