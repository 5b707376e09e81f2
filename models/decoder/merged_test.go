package decoder

import (
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// allTokensBackend is a CPU backend that asks for the merged GEMMs at every
// token count (kernels.MergedAllTokenser), for q/k/v and gate/up as set.
type allTokensBackend struct {
	*kernels.CPUBackend
	qkv, gateUp bool
}

func (b allTokensBackend) MergesAllTokens(gateUp bool) bool {
	if gateUp {
		return b.gateUp
	}
	return b.qkv
}

// anyHook watches every module (it is no nn.Watcher).
type anyHook struct{}

func (anyHook) Enter(nn.Module) error             { return nil }
func (anyHook) Exit(_ nn.Module, err error) error { return err }

// TestMergesTokenRange: merges offers the merged GEMM for 2..MergedMaxTokens
// rows on any backend, for more rows only where the backend asks for it
// (per kind: q/k/v or gate/up), never for one row, quantized weights or
// watched Linears.
func TestMergesTokenRange(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	cb, err := kernels.NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	root := &nn.Container{}
	tree := nn.Init(root, "m")
	q, k := nn.NewLinear(root, "q", 8, 8), nn.NewLinear(root, "k", 8, 8)
	h := func(T int) *runtime.Tensor {
		x, err := runtime.NewTensor(dev, runtime.BF16, runtime.Shape{T, 8}, "h")
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	gateOnly := allTokensBackend{CPUBackend: cb, gateUp: true}
	both := allTokensBackend{CPUBackend: cb, qkv: true, gateUp: true}
	for _, c := range []struct {
		name   string
		b      kernels.Backend
		T      int
		gateUp bool
		want   bool
	}{
		{"one row", both, 1, true, false},
		{"two rows", cb, 2, false, true},
		{"at the cap", cb, MergedMaxTokens, true, true},
		{"past the cap, default backend", cb, MergedMaxTokens + 1, true, false},
		{"past the cap, gate/up asked", gateOnly, 8192, true, true},
		{"past the cap, q/k/v not asked", gateOnly, 8192, false, false},
		{"past the cap, q/k/v asked", both, 8192, false, true},
	} {
		if got := merges(c.b, h(c.T), c.gateUp, q, k); got != c.want {
			t.Errorf("%s: merges = %v, want %v", c.name, got, c.want)
		}
	}
	remove := tree.AddHook(anyHook{})
	if merges(both, h(8192), true, q, k) {
		t.Errorf("merges offers watched Linears")
	}
	remove()
	k.Scale = nn.AddParam(k, "scale", nil)
	if merges(both, h(8192), true, q, k) {
		t.Errorf("merges offers a quantized Linear")
	}
}
