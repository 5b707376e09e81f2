//go:build cuda

package all_test

import (
	"fmt"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestIdleStepGraphGPU: a random 4-layer Llama of head width 128 offloaded
// onto the GPU under a budget that keeps every layer resident replays its
// one-token forwards from a recorded CUDA graph (the idle step graph) over
// three greedy runs of 12 steps (one recording a run: a new KV cache each);
// the replayed steps' logits are within 1e-3 of the largest logit of the
// eager ones (NoIdleStepGraph) and the greedy tokens are the same.
func TestIdleStepGraphGPU(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		if _, ok := d.Backend.(kernels.StepCapturer); !ok {
			t.Skipf("%s records no graphs", d.Name)
		}
		dir := megaCheckpoint(t, 4)
		host := runtime.NewCPU(0)
		defer host.Close()
		m := load(t, dir, host)
		cfg := offload.DefaultConfig(d.Dev)
		cfg.GPUBudget = offload.Budget{Bytes: 1 << 30}
		name := fmt.Sprintf("%s-%s", t.Name(), d.Name)
		if err := offload.Offload(m, &cfg, name); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := offload.Release(name, true); err != nil {
				t.Error(err)
			}
		}()
		prompt := []int32{5, 17, 42, 3, 9}
		const steps, runs = 12, 3
		greedy := func() [][]float32 {
			t.Helper()
			out, err := testmodel.Greedy(m, d.Backend, prompt, steps)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		m.NoIdleStepGraph = true
		for i := 0; i < 4 && offload.GetOffloadManager(name).Phase() != offload.PhaseInference; i++ {
			greedy()
		}
		if n := len(offload.OffloadUnits(name)); n != 0 {
			t.Fatalf("%d layers stream under a budget of 1 GiB", n)
		}
		eager := greedy()
		if c, r := m.IdleStepCounts(); c != 0 || r != 0 {
			t.Fatalf("switched off: %d recordings, %d replays", c, r)
		}
		m.NoIdleStepGraph = false
		for run := 0; run < runs; run++ {
			got := greedy()
			closeLogits(t, fmt.Sprintf("run %d, replayed against eager", run), got, eager, 1e-3)
			for i := range eager {
				if a, b := kernels.Argmax(got[i]), kernels.Argmax(eager[i]); a != b {
					t.Fatalf("run %d, pass %d: token %d replayed, %d eager", run, i, a, b)
				}
			}
		}
		if c, r := m.IdleStepCounts(); c < 1 || c > runs || r < steps {
			t.Errorf("%d recordings and %d replays over %d runs of %d steps; want at least a run's steps replayed, at most one recording a run", c, r, runs, steps)
		}
	})
}
