//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// TestGEMVPipeBitIdentical: with GEMVPipe at each depth ("pipe";
// FT_GEMV=pipe), and under FT_GEMV=mixed (q/k/v on gemv.cu's kernel, the
// rest pipelined: GEMVPersistQKV), the one-token q/k/v (MatMulN), gate·up·SiLU
// (GateUpSiLU), residual-adding (MatMulAdd) and fp32-output (MatMul into
// F32: the LM head) products leave bit for bit what gemv.cu's kernels
// leave, on Llama-3-8B's decode shapes (4096 → 4096+1024+1024, 4096 →
// 2×14336, 14336 → 4096 added, 4096 → 128256) and odd ones (widths not a
// multiple of 8·32·U, fewer rows than warps).
func TestGEMVPipeBitIdentical(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	defer func(was string, qkv, early bool) {
		gb.GEMVPipe, gb.GEMVPersistQKV, gb.GEMVEarly = was, qkv, early
	}(gb.GEMVPipe, gb.GEMVPersistQKV, gb.GEMVEarly)
	// The kernel choices below are checked without the early twins (on
	// by default); the bit checks run with them off and on.
	gb.GEMVPersistQKV, gb.GEMVEarly = false, false
	for _, d := range gemvPipeDepths {
		gb.GEMVPipe = d
		if gb.gemvFn(gb.k.gemv3, 4096) == gb.k.gemv3 || gb.gemvFn(gb.k.gateUp, 4096) == gb.k.gateUp ||
			gb.gemvFn(gb.k.gemvAcc, 4096) == gb.k.gemvAcc || gb.gemvFn(gb.k.gemvPersistF32, 4096) == gb.k.gemvPersistF32 {
			t.Fatalf("GEMVPipe %q: a GEMV has no pipelined twin", d)
		}
		// Width 0 has no batch a row: the pipelined loop would not end.
		if gb.gemvFn(gb.k.gemv3, 0) != gb.k.gemv3 || gb.gemvFn(gb.k.gateUp, 0) != gb.k.gateUp {
			t.Fatalf("GEMVPipe %q: width 0 launches a pipelined twin", d)
		}
	}
	// FT_GEMV=mixed: q/k/v on gemv.cu's gemv3_bf16, the others pipelined.
	gb.GEMVPipe, gb.GEMVPersistQKV = gemvPipeDefault, true
	if gb.gemvFn(gb.k.gemv3, 4096) != gb.k.gemv3 {
		t.Fatalf("mixed: q/k/v launches %s, want gemv.cu's gemv3_bf16", gb.gemvFn(gb.k.gemv3, 4096).Name())
	}
	if gb.gemvFn(gb.k.gateUp, 4096) == gb.k.gateUp || gb.gemvFn(gb.k.gemvAcc, 4096) == gb.k.gemvAcc || gb.gemvFn(gb.k.gemvPersistF32, 4096) == gb.k.gemvPersistF32 {
		t.Fatalf("mixed: a GEMV other than q/k/v is not pipelined")
	}
	gb.GEMVPipe, gb.GEMVPersistQKV = "", false
	// weight makes an [N,D] bf16 weight uniform in ±1/√D on the device.
	weight := func(t *testing.T, N, D int) *runtime.Tensor {
		w := gpu(t, runtime.BF16, nil, N, D)
		a := float32(1 / math.Sqrt(float64(D)))
		if err := gb.FillUniform(w, rng.Uint64(), -a, a); err != nil {
			t.Fatal(err)
		}
		return w
	}
	// each runs fn with gemv.cu's kernels and then each depth, and checks
	// the outputs' bits (and that every element was written).
	each := func(t *testing.T, what string, fn func() []*runtime.Tensor) {
		t.Helper()
		var want [][]float32
		for _, o := range fn() {
			want = append(want, read(t, o))
		}
		for j := range want {
			for k, v := range want[j] {
				if math.IsNaN(float64(v)) {
					t.Fatalf("%s output %d: element %d unwritten by gemv.cu's kernel", what, j, k)
				}
			}
		}
		for _, early := range []bool{false, true} {
			for _, d := range append(slices.Clone(gemvPipeDepths), gemvMixed) {
				if d == gemvMixed {
					gb.GEMVPipe, gb.GEMVPersistQKV = gemvPipeDefault, true
				} else {
					gb.GEMVPipe = d
				}
				gb.GEMVEarly = early
				outs := fn()
				gb.GEMVPipe, gb.GEMVPersistQKV, gb.GEMVEarly = "", false, false
				for j, o := range outs {
					got := read(t, o)
					if k := sameBits(got, want[j]); k >= 0 {
						t.Errorf("%s output %d, FT_GEMV=%s FT_GEMV_EARLY=%v: element %d = %v, gemv.cu's %v", what, j, d, early, k, got[k], want[j][k])
					}
				}
			}
		}
	}
	// The early twins (the default): every default GEMV has one of its
	// own, and width 0 stays off the pipelined loop with them too.
	func() {
		defer func(was string, qkv, early bool) {
			gb.GEMVPipe, gb.GEMVPersistQKV, gb.GEMVEarly = was, qkv, early
		}(gb.GEMVPipe, gb.GEMVPersistQKV, gb.GEMVEarly)
		gb.GEMVPipe, gb.GEMVPersistQKV = gemvPipeDefault, true
		var plain []*cuda.Function
		for _, f := range []*cuda.Function{gb.k.gemv3, gb.k.gateUp, gb.k.gemvAcc, gb.k.gemvPersistF32} {
			plain = append(plain, gb.gemvFn(f, 4096))
		}
		gb.GEMVEarly = true
		for i, f := range []*cuda.Function{gb.k.gemv3, gb.k.gateUp, gb.k.gemvAcc, gb.k.gemvPersistF32} {
			if e := gb.gemvFn(f, 4096); e == nil || e == plain[i] || !strings.Contains(e.Name(), "early") {
				t.Fatalf("early twins on: %s has no early twin", plain[i].Name())
			}
		}
		for _, f := range []*cuda.Function{gb.k.gemv3, gb.k.gateUp} {
			if got := gb.gemvFn(f, 0); strings.Contains(got.Name(), "_pipe") {
				t.Fatalf("early twins on: width 0 launches %s, a pipelined twin", got.Name())
			}
		}
	}()
	for _, c := range []struct{ N0, N1, N2, D int }{{4096, 1024, 1024, 4096}, {100, 37, 5, 520}, {3, 2, 1, 8}, {64, 64, 64, 2056}, {40, 30, 20, 8200}} {
		t.Run(fmt.Sprintf("qkv_%d_%d_%d_x%d", c.N0, c.N1, c.N2, c.D), func(t *testing.T) {
			x := gpu(t, runtime.BF16, randBF16(rng, c.D, 1), 1, c.D)
			ws := []*runtime.Tensor{weight(t, c.N0, c.D), weight(t, c.N1, c.D), weight(t, c.N2, c.D)}
			each(t, "MatMulN", func() []*runtime.Tensor {
				outs := []*runtime.Tensor{poisoned(t, runtime.BF16, 1, c.N0), poisoned(t, runtime.BF16, 1, c.N1), poisoned(t, runtime.BF16, 1, c.N2)}
				if err := gb.MatMulN(outs, x, ws); err != nil {
					t.Fatal(err)
				}
				return outs
			})
		})
	}
	for _, c := range []struct{ N, D int }{{14336, 4096}, {1001, 520}, {5, 4104}, {333, 136}} {
		t.Run(fmt.Sprintf("gateup_%dx%d", c.N, c.D), func(t *testing.T) {
			x := gpu(t, runtime.BF16, randBF16(rng, c.D, 2), 1, c.D)
			wg, wu := weight(t, c.N, c.D), weight(t, c.N, c.D)
			each(t, "GateUpSiLU", func() []*runtime.Tensor {
				out := poisoned(t, runtime.BF16, 1, c.N)
				if err := gb.GateUpSiLU(out, x, wg, wu); err != nil {
					t.Fatal(err)
				}
				return []*runtime.Tensor{out}
			})
		})
	}
	for _, c := range []struct{ N, D int }{{4096, 14336}, {4096, 4096}, {1001, 520}, {7, 14344}} {
		t.Run(fmt.Sprintf("acc_%dx%d", c.N, c.D), func(t *testing.T) {
			x := gpu(t, runtime.BF16, randBF16(rng, c.D, 1), 1, c.D)
			w := weight(t, c.N, c.D)
			y0 := randBF16(rng, c.N, 4)
			each(t, "MatMulAdd", func() []*runtime.Tensor {
				y := gpu(t, runtime.F32, y0, 1, c.N)
				if err := gb.MatMulAdd(y, x, w); err != nil {
					t.Fatal(err)
				}
				return []*runtime.Tensor{y}
			})
		})
	}
	for _, c := range []struct{ N, D int }{{128256, 4096}, {1001, 520}, {3, 8}} {
		t.Run(fmt.Sprintf("f32out_%dx%d", c.N, c.D), func(t *testing.T) {
			x := gpu(t, runtime.BF16, randBF16(rng, c.D, 1), 1, c.D)
			w := weight(t, c.N, c.D)
			each(t, "MatMul F32", func() []*runtime.Tensor {
				out := poisoned(t, runtime.F32, 1, c.N)
				if err := gb.MatMul(out, x, w); err != nil {
					t.Fatal(err)
				}
				return []*runtime.Tensor{out}
			})
		})
	}
}
