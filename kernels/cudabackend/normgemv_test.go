//go:build cuda

package cudabackend

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestNormProjectorGPU: the GEMVs with the RMSNorm folded in (NormMatMulN,
// NormGateUpSiLU, NormMatMul) give bit for bit what RMSNorm of the F32
// residual and then the plain op give on the GPU, and the CPU reference's
// values; widths where the norm's block has one float4 a thread (4096),
// several (5120), fewer threads than the fused block (136, 64); a width the
// kernels do not take (4100) and NoFusedNorm decline, enqueueing nothing.
// The folding is off by default (FT_FUSE_NORM): the test turns it on.
func TestNormProjectorGPU(t *testing.T) {
	needGPU(t)
	gb.NoFusedNorm = false
	defer func() { gb.NoFusedNorm = noFusedNormFromEnv() }()
	rng := newRNG(t)
	const eps = 1e-5
	for _, c := range []struct{ D, Nq, Nkv, I, V int }{{4096, 4096, 1024, 14336, 32000}, {5120, 640, 128, 1000, 777}, {136, 64, 16, 96, 100}, {64, 32, 32, 40, 50}} {
		t.Run(fmt.Sprintf("D%d", c.D), func(t *testing.T) {
			xv, nv := randBF16(rng, c.D, 3), randBF16(rng, c.D, 1)
			s := float32(1 / math.Sqrt(float64(c.D)))
			wq, wk, wv := randBF16(rng, c.Nq*c.D, s), randBF16(rng, c.Nkv*c.D, s), randBF16(rng, c.Nkv*c.D, s)
			wg, wu, wh := randBF16(rng, c.I*c.D, s), randBF16(rng, c.I*c.D, s), randBF16(rng, c.V*c.D, s)
			gx, gn := gpu(t, runtime.F32, xv, 1, c.D), gpu(t, runtime.BF16, nv, c.D)
			gws := []*runtime.Tensor{gpu(t, runtime.BF16, wq, c.Nq, c.D), gpu(t, runtime.BF16, wk, c.Nkv, c.D), gpu(t, runtime.BF16, wv, c.Nkv, c.D)}
			gg, gu, gh := gpu(t, runtime.BF16, wg, c.I, c.D), gpu(t, runtime.BF16, wu, c.I, c.D), gpu(t, runtime.BF16, wh, c.V, c.D)

			// The unfused GPU path.
			h := poisoned(t, runtime.BF16, 1, c.D)
			if err := gb.RMSNorm(h, gx, gn, eps); err != nil {
				t.Fatal(err)
			}
			q3 := []*runtime.Tensor{poisoned(t, runtime.BF16, 1, c.Nq), poisoned(t, runtime.BF16, 1, c.Nkv), poisoned(t, runtime.BF16, 1, c.Nkv)}
			if err := gb.MatMulN(q3, h, gws); err != nil {
				t.Fatal(err)
			}
			act := poisoned(t, runtime.BF16, 1, c.I)
			if err := gb.GateUpSiLU(act, h, gg, gu); err != nil {
				t.Fatal(err)
			}
			logits := poisoned(t, runtime.F32, 1, c.V)
			if err := gb.MatMul(logits, h, gh); err != nil {
				t.Fatal(err)
			}
			want := map[string][]float32{"q": read(t, q3[0]), "k": read(t, q3[1]), "v": read(t, q3[2]), "act": read(t, act), "logits": read(t, logits)}

			// The CPU reference.
			rh := host(t, runtime.F32, nil, 1, c.D)
			if err := cb.RMSNorm(rh, host(t, runtime.F32, xv, 1, c.D), host(t, runtime.F32, nv, c.D), eps); err != nil {
				t.Fatal(err)
			}
			hb := read(t, h)
			compare(t, "RMSNorm (GPU) against the CPU", hb, rh.F32(), 1e-2, 1e-2)
			ref := func(w []float32, N int) []float32 {
				r := host(t, runtime.F32, nil, 1, N)
				if err := cb.MatMul(r, host(t, runtime.F32, hb, 1, c.D), host(t, runtime.BF16, w, N, c.D)); err != nil {
					t.Fatal(err)
				}
				return r.F32()
			}

			f3 := []*runtime.Tensor{poisoned(t, runtime.BF16, 1, c.Nq), poisoned(t, runtime.BF16, 1, c.Nkv), poisoned(t, runtime.BF16, 1, c.Nkv)}
			fact := poisoned(t, runtime.BF16, 1, c.I)
			flog := poisoned(t, runtime.F32, 1, c.V)
			for name, run := range map[string]func() (bool, error){
				"NormMatMulN":    func() (bool, error) { return gb.NormMatMulN(f3, gx, gn, eps, gws) },
				"NormGateUpSiLU": func() (bool, error) { return gb.NormGateUpSiLU(fact, gx, gn, eps, gg, gu) },
				"NormMatMul":     func() (bool, error) { return gb.NormMatMul(flog, gx, gn, eps, gh) },
			} {
				if ran, err := run(); err != nil || !ran {
					t.Fatalf("%s: ran %v, %v", name, ran, err)
				}
			}
			got := map[string][]float32{"q": read(t, f3[0]), "k": read(t, f3[1]), "v": read(t, f3[2]), "act": read(t, fact), "logits": read(t, flog)}
			for name, g := range got {
				if !slices.Equal(g, want[name]) {
					t.Errorf("%s with the norm folded in differs from RMSNorm then the plain GEMV", name)
				}
			}
			compare(t, "q", got["q"], ref(wq, c.Nq), 2e-3, 8e-3)
			compare(t, "v", got["v"], ref(wv, c.Nkv), 2e-3, 8e-3)
			compare(t, "logits", got["logits"], ref(wh, c.V), 1e-4, 1e-4)
		})
	}

	t.Run("declines", func(t *testing.T) {
		const D = 4100
		gx, gn := gpu(t, runtime.F32, randBF16(rng, D, 1), 1, D), gpu(t, runtime.BF16, randBF16(rng, D, 1), D)
		w := gpu(t, runtime.BF16, randBF16(rng, 8*D, 0.01), 8, D)
		out := poisoned(t, runtime.F32, 1, 8)
		if ran, err := gb.NormMatMul(out, gx, gn, eps, w); ran || err != nil {
			t.Errorf("width %d: ran %v, %v; want a decline", D, ran, err)
		}
		gb.NoFusedNorm = true
		defer func() { gb.NoFusedNorm = noFusedNormFromEnv() }()
		const D2 = 4096
		gx2, gn2 := gpu(t, runtime.F32, randBF16(rng, D2, 1), 1, D2), gpu(t, runtime.BF16, randBF16(rng, D2, 1), D2)
		w2 := gpu(t, runtime.BF16, randBF16(rng, 8*D2, 0.01), 8, D2)
		if ran, err := gb.NormMatMul(out, gx2, gn2, eps, w2); ran || err != nil {
			t.Errorf("NoFusedNorm: ran %v, %v; want a decline", ran, err)
		}
		if v := read(t, out); !math.IsNaN(float64(v[0])) {
			t.Error("a declined call wrote its output")
		}
	})
}
