package offload_test

import (
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/place"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestCustomModelFromCheckpoint: a model that is not Llama, profiled once,
// is loaded again from a checkpoint written with loader's writer: its meta
// parameters are bound with place.Bind (shapes only), then the engine places
// the weights from the checkpoint (a place.Source) and the outputs equal the
// model's. A checkpoint whose tensor disagrees with the model is refused,
// naming the tensor, with nothing left allocated.
func TestCustomModelFromCheckpoint(t *testing.T) {
	const depth, dim, hidden = 5, 32, 64
	host := runtime.NewCPU(0)
	tower, err := NewTower(host, depth, dim, hidden, 11)
	if err != nil {
		t.Fatal(err)
	}
	x, _ := runtime.NewTensor(host, runtime.F32, runtime.Shape{2, dim}, "x")
	for i := range x.F32() {
		x.F32()[i] = float32(i%9) - 4
	}
	hk, _ := kernels.NewCPUBackend(host)
	ref, err := tower.Forward(hk, x)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]float32(nil), ref.F32()...)

	// Profile it.
	gpu := runtime.NewCPU(0)
	name := uniqueName(t)
	cfg := offload.DefaultConfig(gpu)
	cfg.Include = []string{"blocks.*"}
	cfg.GPUBudget = offload.Budget{Bytes: 256 + 3*3*dim*hidden*4}
	cfg.TransferBlocks = 2
	if err := offload.Offload(tower, &cfg, name); err != nil {
		t.Fatal(err)
	}
	gk, _ := kernels.NewCPUBackend(gpu)
	xs, _ := runtime.NewTensor(gpu, runtime.F32, runtime.Shape{2, dim}, "x")
	copy(xs.F32(), x.F32())
	for pass := 0; pass < 4; pass++ {
		out, err := tower.Forward(gk, xs)
		if err != nil {
			t.Fatal(err)
		}
		out.Buffer().Free()
	}
	st, err := offload.GetOffloadManager(name).State()
	if err != nil {
		t.Fatal(err)
	}
	if err := offload.Release(name, true); err != nil {
		t.Fatal(err)
	}

	write := func(edit func(*loader.NamedTensor)) *loader.Checkpoint {
		ts := namedTensors(tower, "")
		for i := range ts {
			if edit != nil {
				edit(&ts[i])
			}
		}
		return testmodel.WriteCheckpoint(t, ts)
	}
	metaTower := func(ck *loader.Checkpoint) *Tower {
		m, err := NewTower(runtime.NewMeta(), depth, dim, hidden, 0)
		if err != nil {
			t.Fatal(err)
		}
		// NewTower bound meta tensors already; place.Bind checks them
		// against the checkpoint and binds its shapes (reading nothing).
		if _, err := place.Bind(m, ck, runtime.NewMeta()); err != nil {
			t.Fatal(err)
		}
		return m
	}

	t.Run("loads and runs", func(t *testing.T) {
		ck := write(nil)
		dev := runtime.NewCPU(0)
		m := metaTower(ck)
		name := uniqueName(t)
		c := offload.DefaultConfig(dev)
		if _, err := offload.LoadModelFromProfile(m, ck, st, &c, name, offload.LoadOptions{}); err != nil {
			t.Fatal(err)
		}
		if ck.BytesRead() != ck.TotalBytes() {
			t.Errorf("read %d of %d bytes; want each once", ck.BytesRead(), ck.TotalBytes())
		}
		k, _ := kernels.NewCPUBackend(dev)
		in, _ := runtime.NewTensor(dev, runtime.F32, runtime.Shape{2, dim}, "x")
		copy(in.F32(), x.F32())
		for pass := 0; pass < 3; pass++ {
			out, err := m.Forward(strictBackend{k, dev}, in)
			if err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if out.F32()[i] != want[i] {
					t.Fatalf("pass %d: output[%d] = %v, want %v", pass, i, out.F32()[i], want[i])
				}
			}
			out.Buffer().Free()
		}
		in.Buffer().Free()
		if err := offload.Release(name, false); err != nil {
			t.Fatal(err)
		}
		if dev.Memory().InUse != 0 || dev.HostMemory().InUse != 0 {
			t.Fatalf("after Release: %d device, %d host bytes", dev.Memory().InUse, dev.HostMemory().InUse)
		}
	})

	t.Run("refuses a mismatched tensor", func(t *testing.T) {
		good := write(nil)
		bad := write(func(nt *loader.NamedTensor) {
			if nt.Name == "blocks.2.gate.weight" {
				nt.Shape = []int{nt.Shape[1], nt.Shape[0]}
			}
		})
		dev := runtime.NewCPU(0)
		m := metaTower(good)
		c := offload.DefaultConfig(dev)
		_, err := offload.LoadModelFromProfile(m, bad, st, &c, uniqueName(t), offload.LoadOptions{})
		if err == nil || !strings.Contains(err.Error(), "blocks.2.gate.weight") || !strings.Contains(err.Error(), "checkpoint ") {
			t.Fatalf("mismatched checkpoint: %v", err)
		}
		if bad.BytesRead() != 0 || dev.Memory().InUse != 0 || dev.HostMemory().InUse != 0 {
			t.Fatalf("after the refusal: read %d, %d device, %d host bytes", bad.BytesRead(), dev.Memory().InUse, dev.HostMemory().InUse)
		}
	})
	xs.Buffer().Free()
}
