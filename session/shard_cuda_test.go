//go:build cuda

package session_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
	"github.com/flextensor-go/flextensor/session"
)

// gpuClose fails t unless got is within the GPU tolerance of want
// (devtest.CUDATol: bf16 activations, and another summation order).
func gpuClose(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d logits, want %d", what, len(got), len(want))
	}
	if !devtest.Close(t, got, want, devtest.CUDATol.Abs, devtest.CUDATol.Rel) {
		t.Errorf("%s: max diff %.3g", what, devtest.MaxAbsDiff(got, want))
	}
}

// TestShardedGPUs: every fixture family cut over the visible GPUs (4 when
// there are 4 or more, else 2: the fixtures have 4 heads), resident and
// with every layer streamed (budget 0 per GPU), gives the single-GPU
// logits and greedy tokens, and the CPU's logits, within the GPU
// tolerance. It skips on fewer than 2 GPUs (TestShardedNCCLOneGPU runs the
// NCCL path on one).
func TestShardedGPUs(t *testing.T) {
	n, err := cuda.DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Skipf("%d GPU visible; the sharded path needs 2 or more (nvidia-h200-x2); TestShardedNCCLOneGPU covers NCCL on one", n)
	}
	m := 2
	if n >= 4 {
		m = 4
	}
	devs := make([]string, m)
	for i := range devs {
		devs[i] = fmt.Sprintf("cuda:%d", i)
	}
	list := strings.Join(devs, ",")
	for _, fx := range shardFixtures {
		t.Run(fx, func(t *testing.T) {
			dir := "../testdata/" + fx
			run := func(device, budget string) shardRun {
				s, err := session.Open(dir, device, session.Options{GPUBudget: budget})
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					if err := s.Close(); err != nil {
						t.Error(err)
					}
				}()
				return runShardCase(t, s)
			}
			cpu, one := run("cpu", ""), run("cuda:0", "")
			for _, budget := range []string{"", "0"} {
				t.Run(fmt.Sprintf("%s-budget%q", list, budget), func(t *testing.T) {
					got := run(list, budget)
					gpuClose(t, "all positions vs one GPU", got.all, one.all)
					gpuClose(t, "all positions vs the CPU", got.all, cpu.all)
					for i := range one.steps {
						gpuClose(t, fmt.Sprintf("step %d vs one GPU", i), got.steps[i], one.steps[i])
						gpuClose(t, fmt.Sprintf("step %d vs the CPU", i), got.steps[i], cpu.steps[i])
					}
					if !slices.Equal(got.greedy, one.greedy) {
						t.Errorf("greedy tokens %v, one GPU %v", got.greedy, one.greedy)
					}
				})
			}
		})
	}
}

// TestShardedNCCLOneGPU: a model "sharded" over one GPU with an NCCL
// communicator of one rank (ncclCommInitAll over one device) runs the same
// code as several GPUs (every all-reduce through NCCL) and gives the plain
// model's logits and tokens.
func TestShardedNCCLOneGPU(t *testing.T) {
	v, where, err := cuda.NCCLVersion()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NCCL %d from %s", v, where)
	dev, b, err := session.OpenDevice("cuda:0", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for _, fx := range shardFixtures {
		t.Run(fx, func(t *testing.T) {
			dir := "../testdata/" + fx
			plain, ck, err := session.Load(dir, dev)
			if err != nil {
				t.Fatal(err)
			}
			want := runModelCase(t, plain, b)
			plain.Close()
			ck.Close()
			comms, err := cuda.NewNCCLGroup([]runtime.Device{dev})
			if err != nil {
				t.Fatal(err)
			}
			m, ck, err := models.LoadSharded(dir, []runtime.Device{dev}, []kernels.Backend{b}, comms)
			if err != nil {
				t.Fatal(err)
			}
			got := runModelCase(t, m, b)
			m.Close() // closes the communicator
			ck.Close()
			gpuClose(t, "all positions", got.all, want.all)
			for i := range want.steps {
				gpuClose(t, fmt.Sprintf("step %d", i), got.steps[i], want.steps[i])
			}
			if !slices.Equal(got.greedy, want.greedy) {
				t.Errorf("greedy tokens %v, plain model %v", got.greedy, want.greedy)
			}
			if kernels.Argmax(got.all[len(got.all)-m.Cfg.VocabSize:]) != kernels.Argmax(want.all[len(want.all)-m.Cfg.VocabSize:]) {
				t.Error("last position's top-1 differs")
			}
		})
	}
}
