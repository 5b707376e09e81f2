package all_test

import (
	"errors"
	"math"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/runtime"
)

// addCPU is the CPU backend as a kernels.MatMulAdder and a
// kernels.FP8MatMulAdder that adds FP8 products of one token (unless off):
// MatMulAddFP8 is the CPU reference, counted; MatMulAdd (plain weights)
// must not be called on the FP8 fixtures' layers.
type addCPU struct {
	*kernels.CPUBackend
	off         bool
	calls, rows int
}

func (b *addCPU) MatMulAdd(y, x, w *runtime.Tensor) error {
	return errors.New("addCPU: MatMulAdd of a plain weight on an FP8 layer")
}

func (b *addCPU) AddsFP8(rows int) bool { return !b.off && rows == 1 }

func (b *addCPU) MatMulAddFP8(y, x, w, scale *runtime.Tensor, layout kernels.FP8Layout) error {
	b.calls++
	b.rows += x.NumElements() / w.Dim(1)
	return b.CPUBackend.MatMulAddFP8(y, x, w, scale, layout)
}

var (
	_ kernels.MatMulAdder    = (*addCPU)(nil)
	_ kernels.FP8MatMulAdder = (*addCPU)(nil)
)

// fp8FixtureDirs are the FP8 fixtures: per channel and in 64-blocks.
var fp8FixtureDirs = []string{"../../testdata/tiny-llama-fp8-channel", "../../testdata/tiny-llama-fp8-block"}

// fp8StepCount is how many one-token steps fp8Steps runs after the prompt.
const fp8StepCount = 5

// fp8Steps loads the FP8 fixture dir on host and returns the model and a
// run: the logits of a 4-token prompt's forward and of fp8StepCount greedy
// one-token steps on a backend, in a fresh KV cache.
// sameStepLogits fails t unless every step's logits in got have the bits
// of want's; what and ref name the run and the path it is compared with.
func sameStepLogits(t *testing.T, what, ref string, got, want [][]float32) {
	t.Helper()
	for s := range want {
		for i := range want[s] {
			if math.Float32bits(got[s][i]) != math.Float32bits(want[s][i]) {
				t.Fatalf("%s: forward %d, logit %d = %v, want %v (%s)", what, s, i, got[s][i], want[s][i], ref)
			}
		}
	}
}

func fp8Steps(t *testing.T, dir string, host runtime.Device) (*decoder.Model, func(kernels.Backend) [][]float32) {
	t.Helper()
	m := load(t, dir, host)
	prompt := []int32{1, 15043, 29892, 590}
	for i := range prompt {
		prompt[i] %= int32(m.Cfg.VocabSize)
	}
	return m, func(b kernels.Backend) [][]float32 {
		t.Helper()
		cache, err := m.NewKVCache(b, len(prompt)+fp8StepCount)
		if err != nil {
			t.Fatal(err)
		}
		defer cache.Free()
		out, err := testmodel.Steps(m, b, cache, prompt, fp8StepCount, testmodel.Argmax)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
}

// TestFP8AddDecodeCPU: on a backend that adds FP8 products into the
// residual stream (the decoder's path on the GPU: FT_FP8_ADD), both FP8
// fixtures' decode steps run every layer's o_proj and down_proj through
// MatMulAddFP8 for one token (and so does the prompt's last layer, which
// goes on past attention with the last row alone: models/decoder/lastrows.go;
// never for the prompt's rows) and give, bit for bit, the logits of the CPU
// backend's product-then-add path; with
// AddsFP8 false, NoResidualAccumulate, or a hook watching one layer's
// o_proj, that projection is not added.
func TestFP8AddDecodeCPU(t *testing.T) {
	host := runtime.NewCPU(0)
	defer host.Close()
	cpuB, err := kernels.NewCPUBackend(host)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range fp8FixtureDirs {
		t.Run(dir[len("../../testdata/"):], func(t *testing.T) {
			m, run := fp8Steps(t, dir, host)
			L := m.Cfg.NumHiddenLayers
			want := run(cpuB)
			check := func(what string, b *addCPU, calls int) {
				t.Helper()
				sameStepLogits(t, what, "product then add", run(b), want)
				if b.calls != calls || b.rows != calls {
					t.Errorf("%s: %d MatMulAddFP8 calls over %d rows, want %d of one row", what, b.calls, b.rows, calls)
				}
			}
			check("adding", &addCPU{CPUBackend: cpuB}, 2*L*fp8StepCount+2)
			check("AddsFP8 false", &addCPU{CPUBackend: cpuB, off: true}, 0)
			m.NoResidualAccumulate = true
			check("NoResidualAccumulate", &addCPU{CPUBackend: cpuB}, 0)
			m.NoResidualAccumulate = false
			remove := m.Tree().AddHook(watchModule{m.Layers[1].Attn.O})
			check("o_proj of layer 1 watched", &addCPU{CPUBackend: cpuB}, (2*L-1)*fp8StepCount+2)
			remove()
		})
	}
}
