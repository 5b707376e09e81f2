//go:build cuda

package cudabackend

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// readI32 reads an I32 GPU tensor.
func readI32(t *testing.T, x *runtime.Tensor) []int32 {
	t.Helper()
	raw := make([]byte, 4*x.NumElements())
	if err := gb.ReadBytes(raw, x); err != nil {
		t.Fatal(err)
	}
	out := make([]int32, x.NumElements())
	for i := range out {
		out[i] = int32(uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24)
	}
	return out
}

// gpuI32 makes an I32 GPU tensor holding vals.
func gpuI32(t *testing.T, vals []int32, shape ...int) *runtime.Tensor {
	t.Helper()
	x, err := runtime.NewTensor(gdev, runtime.I32, shape, "test "+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Buffer().Free)
	raw := make([]byte, 4*len(vals))
	for i, v := range vals {
		raw[4*i], raw[4*i+1], raw[4*i+2], raw[4*i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	if err := gb.WriteBytes(x, raw); err != nil {
		t.Fatal(err)
	}
	return x
}

// TestMoERouteGPU: the device top-k picks exactly the CPU routing's experts
// in its order, with its weights (F32, within an ulp or two: exp in double
// on both sides), renormalised or not, with ties (logits on a coarse grid)
// and a NaN row, at Qwen3-30B-A3B's 128 experts and at small counts.
func TestMoERouteGPU(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct{ T, E, K int }{{1, 128, 8}, {16, 128, 8}, {5, 8, 2}, {3, 16, 4}, {2, 300, 7}} {
		t.Run(fmt.Sprintf("T%d_E%d_K%d", c.T, c.E, c.K), func(t *testing.T) {
			logits := make([]float32, c.T*c.E)
			for i := range logits {
				if c.T > 2 {
					logits[i] = float32(rng.IntN(7)) / 2 // ties
				} else {
					logits[i] = rng.Float32()*8 - 4
				}
			}
			if c.T == 5 {
				logits[3*c.E+1] = float32(math.NaN())
			}
			for _, renorm := range []bool{false, true} {
				ids, wts := gpuI32(t, make([]int32, c.T*c.K), c.T, c.K), poisoned(t, runtime.F32, c.T, c.K)
				if err := gb.MoERoute(ids, wts, gpu(t, runtime.F32, logits, c.T, c.E), renorm); err != nil {
					t.Fatal(err)
				}
				var r kernels.Routing
				if err := r.Route(logits, c.E, c.K, renorm); err != nil {
					t.Fatal(err)
				}
				if got := readI32(t, ids); !slices.Equal(got, r.Experts) {
					t.Fatalf("renorm %v: experts %v, want %v", renorm, got, r.Experts)
				}
				got := read(t, wts)
				for i, w := range got {
					want := r.Weights[i]
					if math.IsNaN(float64(want)) && math.IsNaN(float64(w)) {
						continue
					}
					if math.Abs(float64(w-want)) > 2e-7*math.Abs(float64(want)) {
						t.Errorf("renorm %v: weight %d = %v, want %v", renorm, i, w, want)
					}
				}
			}
		})
	}
}

// TestMoEFusedGPU: MoEGateUp and MoEDown on the GPU against the CPU's
// fused ops (the per-expert computation) on the same bf16 inputs, at
// Qwen3-30B-A3B's expert shape (one token of 128 experts, 16 of 24) and at small shapes,
// with tokens sharing experts; the table is set twice (moved weights are
// picked up); bad tables are refused.
func TestMoEFusedGPU(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	for _, c := range []struct{ T, E, K, I, D int }{{1, 128, 8, 768, 2048}, {16, 24, 8, 768, 2048}, {5, 16, 4, 32, 64}, {3, 8, 2, 96, 64}} {
		t.Run(fmt.Sprintf("T%d_E%d_K%d_%dx%d", c.T, c.E, c.K, c.I, c.D), func(t *testing.T) {
			E, I, D, T, K := c.E, c.I, c.D, c.T, c.K
			idv := make([]int32, T*K)
			for tok := 0; tok < T; tok++ {
				pool := rng.Perm(E)
				if tok%2 == 1 {
					pool = rng.Perm(min(E, K+2)) // tokens sharing experts
				}
				for j := 0; j < K; j++ {
					idv[tok*K+j] = int32(pool[j])
				}
			}
			// Distinct weights for the routed experts; the others share
			// one set (the table still has E entries).
			var gg, gu, gd, hg, hu, hd []*runtime.Tensor
			var shared [6]*runtime.Tensor
			for e := 0; e < E; e++ {
				routed := slices.Contains(idv, int32(e))
				for i, w := range []struct {
					g, h *[]*runtime.Tensor
					r, c int
				}{{&gg, &hg, I, D}, {&gu, &hu, I, D}, {&gd, &hd, D, I}} {
					if !routed && shared[2*i] != nil {
						*w.g, *w.h = append(*w.g, shared[2*i]), append(*w.h, shared[2*i+1])
						continue
					}
					v := randBF16(rng, w.r*w.c, 0.05)
					gt, ht := gpu(t, runtime.BF16, v, w.r, w.c), host(t, runtime.BF16, v, w.r, w.c)
					if !routed {
						shared[2*i], shared[2*i+1] = gt, ht
					}
					*w.g, *w.h = append(*w.g, gt), append(*w.h, ht)
				}
			}
			wv := randBF16(rng, T*K, 1)
			x := randBF16(rng, T*D, 1)
			gt, err := gb.NewExpertTable(E)
			if err != nil {
				t.Fatal(err)
			}
			defer gt.Close()
			ht, _ := cb.NewExpertTable(E)
			// A first Set at other weights, so the second must replace it.
			if err := gt.Set(gu, gg, gd); err != nil {
				t.Fatal(err)
			}
			if err := gt.Set(gg, gu, gd); err != nil {
				t.Fatal(err)
			}
			if err := ht.Set(hg, hu, hd); err != nil {
				t.Fatal(err)
			}
			ids := gpuI32(t, idv, T, K)
			hids, err := runtime.NewTensor(cpu, runtime.I32, []int{T, K}, "ids")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(hids.Buffer().Free)
			copy(hids.I32(), idv)
			act := poisoned(t, runtime.BF16, T*K, I)
			if err := gb.MoEGateUp(act, gpu(t, runtime.BF16, x, T, D), ids, gt); err != nil {
				t.Fatal(err)
			}
			hact := host(t, runtime.F32, nil, T*K, I)
			if err := cb.MoEGateUp(hact, host(t, runtime.F32, x, T, D), hids, ht); err != nil {
				t.Fatal(err)
			}
			gotAct := read(t, act)
			compare(t, "MoEGateUp", gotAct, hact.F32(), 2e-3, 8e-3)
			// MoEDown from the GPU's activations on both sides.
			out := poisoned(t, runtime.F32, T, D)
			if err := gb.MoEDown(out, act, ids, gpu(t, runtime.F32, wv, T, K), gt); err != nil {
				t.Fatal(err)
			}
			hout := host(t, runtime.F32, nil, T, D)
			if err := cb.MoEDown(hout, host(t, runtime.F32, gotAct, T*K, I), hids, host(t, runtime.F32, wv, T, K), ht); err != nil {
				t.Fatal(err)
			}
			compare(t, "MoEDown", read(t, out), hout.F32(), 1e-4, 1e-4)
		})
	}
	tab, _ := gb.NewExpertTable(2)
	defer tab.Close()
	w := gpu(t, runtime.BF16, nil, 16, 16)
	f := gpu(t, runtime.F32, nil, 16, 16)
	if err := tab.Set([]*runtime.Tensor{w, f}, []*runtime.Tensor{w, w}, []*runtime.Tensor{w, w}); !errors.Is(err, kernels.ErrNotFusable) {
		t.Errorf("F32 expert weight: %v, want ErrNotFusable", err)
	}
	odd := gpu(t, runtime.BF16, nil, 12, 12)
	if err := tab.Set([]*runtime.Tensor{odd, odd}, []*runtime.Tensor{odd, odd}, []*runtime.Tensor{odd, odd}); !errors.Is(err, kernels.ErrNotFusable) {
		t.Errorf("width 12: %v, want ErrNotFusable", err)
	}
	if err := gb.MoEGateUp(poisoned(t, runtime.BF16, 1, 16), gpu(t, runtime.BF16, nil, 1, 16), gpuI32(t, []int32{0}, 1, 1), tab); err == nil {
		t.Error("an unset table was used")
	}
}
