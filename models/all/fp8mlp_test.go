package all_test

import (
	"math"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// mlpCPU is the CPU backend as a kernels.FP8MLPer from two tokens (unless
// off): MLPFP8 runs the reference ops the decoder's unfused path runs
// (GateUpSiLUFP8, MatMulFP8; with add, into tmp then Add) and counts the
// calls, added or not.
type mlpCPU struct {
	*kernels.CPUBackend
	off          bool
	fused, added int
}

func (b *mlpCPU) FusesFP8MLP(rows int, layout kernels.FP8Layout) bool {
	return !b.off && rows >= 2 && layout.Block == 0
}

func (b *mlpCPU) MLPFP8(y, x, g, u, tmp *runtime.Tensor, m kernels.FP8MLP, add bool) error {
	b.fused++
	if err := b.GateUpSiLUFP8(g, u, x, m.Gate, m.Up, m.GateScale, m.UpScale, m.Layout); err != nil {
		return err
	}
	if !add {
		return b.MatMulFP8(y, g, m.Down, m.DownScale, m.Layout)
	}
	b.added++
	if err := b.MatMulFP8(tmp, g, m.Down, m.DownScale, m.Layout); err != nil {
		return err
	}
	return b.Add(y, y, tmp)
}

var _ kernels.FP8MLPer = (*mlpCPU)(nil)

// watchModule is a hook that watches one module.
type watchModule struct{ m nn.Module }

func (h watchModule) Enter(nn.Module) error             { return nil }
func (h watchModule) Exit(_ nn.Module, err error) error { return err }
func (h watchModule) Watches(m nn.Module) bool          { return m == h.m }

// TestFP8MLPFusedPrefill: on a backend with kernels.FP8MLPer a per-channel
// FP8 checkpoint's prefill runs each layer's MLP as one MLPFP8 call that
// adds into the residual stream, and its logits are, bit for bit, those of
// the unfused ops (the fake runs the same ops); with NoResidualAccumulate,
// or the down projection watched by a hook, MLPFP8 writes the output
// instead of adding (watched: that layer's MLP unfused altogether); with
// FusesFP8MLP false (FT_FP8_FUSE=0 on the GPU), for one token, and for
// the block-scaled checkpoint, it is not called.
func TestFP8MLPFusedPrefill(t *testing.T) {
	host := runtime.NewCPU(0)
	defer host.Close()
	cpuB, err := kernels.NewCPUBackend(host)
	if err != nil {
		t.Fatal(err)
	}
	m := load(t, "../../testdata/tiny-llama-fp8-channel", host)
	ids := []int32{1, 15043, 29892, 590, 1024, 338, 7, 42}
	for i := range ids {
		ids[i] %= int32(m.Cfg.VocabSize)
	}
	L := m.Cfg.NumHiddenLayers
	want := fp8Logits(t, m, cpuB, ids)
	same := func(what string, got []float32) {
		t.Helper()
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: logit %d = %v, want %v (the unfused path's)", what, i, got[i], want[i])
			}
		}
	}
	count := func(what string, b *mlpCPU, fused, added int) {
		t.Helper()
		if b.fused != fused || b.added != added {
			t.Errorf("%s: %d MLPFP8 calls, %d adding; want %d, %d", what, b.fused, b.added, fused, added)
		}
	}

	b := &mlpCPU{CPUBackend: cpuB}
	same("fused", fp8Logits(t, m, b, ids))
	count("fused", b, L, L)

	b = &mlpCPU{CPUBackend: cpuB}
	m.NoResidualAccumulate = true
	same("NoResidualAccumulate", fp8Logits(t, m, b, ids))
	m.NoResidualAccumulate = false
	count("NoResidualAccumulate", b, L, 0)

	b = &mlpCPU{CPUBackend: cpuB}
	remove := m.Tree().AddHook(watchModule{m.Layers[1].MLP.Down})
	same("down of layer 1 watched", fp8Logits(t, m, b, ids))
	remove()
	count("down of layer 1 watched", b, L-1, L-1)

	b = &mlpCPU{CPUBackend: cpuB, off: true}
	same("FusesFP8MLP false", fp8Logits(t, m, b, ids))
	count("FusesFP8MLP false", b, 0, 0)

	b = &mlpCPU{CPUBackend: cpuB}
	fp8Logits(t, m, b, ids[:1])
	count("one token", b, 0, 0)

	blk := load(t, "../../testdata/tiny-llama-fp8-block", host)
	b = &mlpCPU{CPUBackend: cpuB}
	fp8Logits(t, blk, b, ids)
	count("block scales", b, 0, 0)
}
