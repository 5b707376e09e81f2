package offload_test

import (
	"slices"
	"sync/atomic"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// fusingBackend gives a backend the fused decode ops (kernels.MultiMatMuler,
// kernels.GateUpSiLUer), made of its own unfused ops so the numbers match
// the unfused path bit for bit, and counts their calls.
type fusingBackend struct {
	kernels.Backend
	qkv, gateUp *atomic.Int64
}

func (f fusingBackend) MatMulN(outs []*runtime.Tensor, x *runtime.Tensor, ws []*runtime.Tensor) error {
	f.qkv.Add(1)
	for i := range outs {
		if err := f.MatMul(outs[i], x, ws[i]); err != nil {
			return err
		}
	}
	return nil
}

func (f fusingBackend) GateUpSiLU(out, x, wg, wu *runtime.Tensor) error {
	f.gateUp.Add(1)
	up, err := runtime.NewTensor(f.Device(), out.DType(), out.Shape(), "fused up scratch")
	if err != nil {
		return err
	}
	defer up.Buffer().Free()
	if err := f.MatMul(out, x, wg); err != nil {
		return err
	}
	if err := f.MatMul(up, x, wu); err != nil {
		return err
	}
	return f.SiLUMul(out, out, up)
}

// TestOffloadedFuses: an offloaded model whose backend has the fused ops
// uses them for its one-token steps (the engine watches only the root and
// the layers, so a layer's projections may fuse), through discovery,
// profiling and inference; the logits equal the resident unfused ones bit
// for bit, and the engine holds the same bytes as an unfused offloaded run:
// discovery attributed the fused weight reads to their own layer, made none
// of them resident as shared.
func TestOffloadedFuses(t *testing.T) {
	prompt := []int32{5, 17, 42, 99}
	const steps = 6
	want := residentReference(t, tinyDir, prompt, steps)
	usage := map[bool]int64{}
	for _, fuse := range []bool{false, true} {
		f := newFixture(t, tinyDir, 0)
		var qkv, gateUp atomic.Int64
		b := f.backend
		if fuse {
			b = fusingBackend{f.backend, &qkv, &gateUp}
		}
		name := uniqueName(t)
		cfg := offload.DefaultConfig(f.dev)
		cfg.TransferBlocks = 2
		cfg.DiscoveryIters, cfg.ProfilingIters = 3, 2 // one-token steps in every phase
		budget := int64(1) << 20
		cfg.GPUBudget = offload.Budget{Bytes: budget}
		if err := offload.Offload(f.model, &cfg, name); err != nil {
			t.Fatal(err)
		}
		got := run(t, f.model, b, prompt, steps)
		for i := range want {
			if !slices.Equal(got[i], want[i]) {
				t.Fatalf("fuse=%v: pass %d: offloaded logits differ from resident ones", fuse, i)
			}
		}
		layers := int64(len(f.model.Layers))
		// gate/up also for the prompt's last layer, which goes on past
		// attention with the last row alone (models/decoder/lastrows.go)
		if fuse && (qkv.Load() != steps*layers || gateUp.Load() != steps*layers+1) {
			t.Errorf("fused calls: %d q/k/v and %d gate/up, want %d and %d (every one-token step of every layer, and the prompt's last layer's MLP)",
				qkv.Load(), gateUp.Load(), steps*layers, steps*layers+1)
		}
		u, err := offload.GetGPUMemoryUsage(name)
		if err != nil {
			t.Fatal(err)
		}
		usage[fuse] = u.TotalBytes
		if len(offload.OffloadUnits(name)) == 0 {
			t.Errorf("fuse=%v: nothing streamed under a budget of %d bytes; the test wants streamed layers", fuse, budget)
		}
		if err := offload.Release(name, true); err != nil {
			t.Fatal(err)
		}
	}
	if usage[true] != usage[false] {
		t.Errorf("the engine holds %d bytes with fusion, %d without: discovery misattributed fused reads", usage[true], usage[false])
	}
}
