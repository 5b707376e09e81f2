package host

import (
	"errors"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestHostDeclinesReferenceFusions: the fused capabilities the embedded
// reference backend always runs (the norm tail, q/k/v + RoPE + KV store, q/k norms + RoPE + KV store)
// decline on the host backend, so the decoder keeps its threaded kernels.
func TestHostDeclinesReferenceFusions(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	b, err := New(dev, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var be kernels.Backend = b
	if f, ok := be.(kernels.MatMulAddNormer); !ok {
		t.Fatal("the host backend is no MatMulAddNormer: the method that declines is gone")
	} else if ran, err := f.MatMulAddNorm(nil, nil, nil, nil, nil, 1e-5); ran || err != nil {
		t.Errorf("MatMulAddNorm: ran %v, err %v; want a decline", ran, err)
	}
	if f, ok := be.(kernels.QKVRoPEStorer); !ok {
		t.Fatal("the host backend is no QKVRoPEStorer: the method that declines is gone")
	} else if ran, err := f.ProjectRoPEStoreKV(kernels.QKVRoPE{}); ran || err != nil {
		t.Errorf("ProjectRoPEStoreKV: ran %v, err %v; want a decline", ran, err)
	}
	if f, ok := be.(kernels.NormRoPEStorer); !ok {
		t.Fatal("the host backend is no NormRoPEStorer: the method that declines is gone")
	} else if ran, err := f.NormRoPEStoreKV(kernels.QKNormRoPE{}); ran || err != nil {
		t.Errorf("NormRoPEStoreKV: ran %v, err %v; want a decline", ran, err)
	}
	if ran, _ := b.CPUBackend.NormRoPEStoreKV(kernels.QKNormRoPE{}); !ran {
		t.Error("the reference CPUBackend declined NormRoPEStoreKV; this test no longer guards anything")
	}
	if f, ok := be.(kernels.MoEFused); !ok {
		t.Fatal("the host backend is no MoEFused: the table that declines is gone")
	} else if tab, err := f.NewExpertTable(2); err != nil {
		t.Fatal(err)
	} else if err := tab.Set(nil, nil, nil); !errors.Is(err, kernels.ErrNotFusable) {
		t.Errorf("the host expert table's Set: %v, want ErrNotFusable (experts one by one on the threaded products)", err)
	}
	// The reference itself runs (and so would have been inherited).
	if ran, _ := b.CPUBackend.ProjectRoPEStoreKV(kernels.QKVRoPE{}); !ran {
		t.Error("the reference CPUBackend declined ProjectRoPEStoreKV; this test no longer guards anything")
	}
}
