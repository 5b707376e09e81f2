package host

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestFP8FusedOpsOnHostKernels: the host backend's fused FP8 ops (the
// decoder's path for one token of FP8 q/k/v and gate·up) give the bits of
// its own MatMulFP8 and SiLUMul, not the embedded reference's: the
// reference's promoted methods would call the reference product.
func TestFP8FusedOpsOnHostKernels(t *testing.T) {
	dev := runtime.NewCPU(0)
	t.Cleanup(func() {
		if err := dev.Close(); err != nil {
			t.Error(err)
		}
	})
	b, err := New(dev, Options{Threads: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r := rand.New(rand.NewPCG(5, 6))
	tensor := func(dt runtime.DType, shape ...int) *runtime.Tensor {
		x, err := runtime.NewTensor(dev, dt, runtime.Shape(shape), "test")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { x.Buffer().Free() })
		switch dt {
		case runtime.F32:
			for i := range x.F32() {
				x.F32()[i] = r.Float32()*2 - 1
			}
		case runtime.F8E4M3:
			for i, p := 0, x.Bytes(); i < len(p); i++ {
				p[i] = byte(r.IntN(0x7f)) | byte(r.IntN(2))<<7 // finite E4M3 codes, both signs
			}
		}
		return x
	}
	const K, N = 256, 96
	layout := kernels.FP8Layout{}
	x := tensor(runtime.F32, 1, K)
	ws := []*runtime.Tensor{tensor(runtime.F8E4M3, N, K), tensor(runtime.F8E4M3, N/2, K)}
	scales := make([]*runtime.Tensor, len(ws))
	for i, w := range ws {
		scales[i] = tensor(runtime.F32, w.Dim(0))
		for j := range scales[i].F32() {
			scales[i].F32()[j] = 0.01 + r.Float32()/64
		}
	}

	outs := []*runtime.Tensor{tensor(runtime.F32, 1, N), tensor(runtime.F32, 1, N/2)}
	if err := b.MatMulNFP8(outs, x, ws, scales, layout); err != nil {
		t.Fatal(err)
	}
	for i, w := range ws {
		want := tensor(runtime.F32, 1, w.Dim(0))
		if err := b.MatMulFP8(want, x, w, scales[i], layout); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(outs[i].F32(), want.F32()) {
			t.Errorf("MatMulNFP8 output %d differs from the host MatMulFP8's bits", i)
		}
	}
	if err := b.MatMulNFP8(outs[:1], x, ws, scales, layout); err == nil {
		t.Error("MatMulNFP8 with one output for two weights: no error")
	}

	wg, wu := ws[0], tensor(runtime.F8E4M3, N, K)
	su := tensor(runtime.F32, N)
	for j := range su.F32() {
		su.F32()[j] = 0.02
	}
	out, up := tensor(runtime.F32, 1, N), tensor(runtime.F32, 1, N)
	if err := b.GateUpSiLUFP8(out, up, x, wg, wu, scales[0], su, layout); err != nil {
		t.Fatal(err)
	}
	g, u := tensor(runtime.F32, 1, N), tensor(runtime.F32, 1, N)
	if err := b.MatMulFP8(g, x, wg, scales[0], layout); err != nil {
		t.Fatal(err)
	}
	if err := b.MatMulFP8(u, x, wu, su, layout); err != nil {
		t.Fatal(err)
	}
	if err := b.SiLUMul(g, g, u); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out.F32(), g.F32()) {
		t.Error("GateUpSiLUFP8 differs from the host MatMulFP8s and SiLUMul's bits")
	}
}
