//go:build cuda

package all_test

import (
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/runtime"
)

// fusingGPU is the CUDA backend counting its fused gate/up GEMMs that ran.
type fusingGPU struct {
	*cudabackend.Backend
	fused int
}

func (c *fusingGPU) GateUpSiLUFused(out, x, wg, wu *runtime.Tensor) (bool, error) {
	ran, err := c.Backend.GateUpSiLUFused(out, x, wg, wu)
	if ran {
		c.fused++
	}
	return ran, err
}

// TestFusedGateUpModelGPU: Qwen2's fixture (intermediate 256, hidden 64:
// shapes the fused gate/up GEMM takes) runs a batch with prefills of 300
// and 260 tokens (forwards of 256 rows and more) and decode steps with the
// fused GEMM (on sm_90: every layer of each large forward, and no other)
// and without (Backend.SwiGLUGEMM off, as FT_SWIGLU_GEMM=0); both choose
// the same greedy token at every forward, and their logits agree within
// 0.05 (the fused GEMM keeps gate and up in fp32 where the separate path
// rounds them to bf16; the largest difference is logged).
func TestFusedGateUpModelGPU(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		gb, ok := d.Backend.(*cudabackend.Backend)
		if !ok {
			t.Skipf("the fused gate/up GEMM is the CUDA backend's; %s has none", d.Name)
		}
		defer func(on bool) { gb.SwiGLUGEMM = on }(gb.SwiGLUGEMM)
		m := load(t, "../../testdata/tiny-qwen2", d.Dev)
		V := m.Cfg.VocabSize
		ps := []seqPlan{{planPrompt(300, 1, V), 3, 0}, {planPrompt(5, 2, V), 4, 0}, {planPrompt(260, 3, V), 2, 1}}
		run := func(on bool) ([][][]float32, int) {
			gb.SwiGLUGEMM = on
			fg := &fusingGPU{Backend: gb}
			cache, err := m.NewPagedCache(fg, 256, 4)
			if err != nil {
				t.Fatal(err)
			}
			defer cache.Close()
			return runBatched(t, m, fg, cache, ps), fg.fused
		}
		on, nOn := run(true)
		off, nOff := run(false)
		L := m.Cfg.NumHiddenLayers
		hopper := false
		if cc, ok := d.Dev.(interface{ ComputeCapability() int }); ok {
			hopper = cc.ComputeCapability() == 90
		}
		if want := map[bool]int{true: 2 * L, false: 0}[hopper]; nOn != want {
			t.Errorf("fused on: %d fused GEMMs, want %d (compute capability 9.0 %v: two forwards of 256 rows or more × %d layers)", nOn, want, hopper, L)
		}
		if nOff != 0 {
			t.Errorf("fused off: %d fused GEMMs ran", nOff)
		}
		worst := 0.0
		for i := range on {
			if len(on[i]) != len(off[i]) {
				t.Fatalf("sequence %d: %d forwards fused, %d not", i, len(on[i]), len(off[i]))
			}
			for s := range on[i] {
				worst = max(worst, maxDiff(on[i][s], off[i][s]))
				if g, w := kernels.Argmax(on[i][s]), kernels.Argmax(off[i][s]); g != w {
					t.Errorf("sequence %d forward %d: greedy token %d fused, %d separate", i, s, g, w)
				}
			}
		}
		if worst > 0.05 {
			t.Errorf("logits differ by %.3g, want at most 0.05", worst)
		}
		t.Logf("qwen2: %d fused gate/up GEMMs; logits differ by at most %.3g", nOn, worst)
	})
}
