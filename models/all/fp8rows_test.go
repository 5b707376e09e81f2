package all_test

import (
	"math"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// rowsCPU is the CPU backend as a kernels.FP8RowsFuser from two tokens: the
// decoder then runs its prefills' q/k/v and gate/up through MatMulNFP8 and
// GateUpSiLUFP8, which it counts.
type rowsCPU struct {
	*kernels.CPUBackend
	multi, gateUp int
}

func (b *rowsCPU) FusesFP8Rows(rows int) bool { return rows >= 2 }

func (b *rowsCPU) MatMulNFP8(outs []*runtime.Tensor, x *runtime.Tensor, ws, scales []*runtime.Tensor, layout kernels.FP8Layout) error {
	if x.Dim(0) > 1 {
		b.multi++
	}
	return b.CPUBackend.MatMulNFP8(outs, x, ws, scales, layout)
}

func (b *rowsCPU) GateUpSiLUFP8(out, up, x, wg, wu, sg, su *runtime.Tensor, layout kernels.FP8Layout) error {
	if x.Dim(0) > 1 {
		b.gateUp++
	}
	return b.CPUBackend.GateUpSiLUFP8(out, up, x, wg, wu, sg, su, layout)
}

// TestFP8RowsFusedPrefill: on a backend that fuses FP8 rows
// (kernels.FP8RowsFuser) a per-channel FP8 checkpoint's prefill takes the
// fused q/k/v and gate/up ops once per layer and gives, bit for bit, the
// logits of the per-projection path.
func TestFP8RowsFusedPrefill(t *testing.T) {
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
	want := fp8Logits(t, m, cpuB, ids)
	rb := &rowsCPU{CPUBackend: cpuB}
	got := fp8Logits(t, m, rb, ids)
	if L := m.Cfg.NumHiddenLayers; rb.multi != L || rb.gateUp != L {
		t.Errorf("%d MatMulNFP8 and %d GateUpSiLUFP8 calls of %d rows, want %d each", rb.multi, rb.gateUp, len(ids), L)
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("logit %d = %v, want %v (the per-projection path's)", i, got[i], want[i])
		}
	}
}
