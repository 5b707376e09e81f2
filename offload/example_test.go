package offload_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// Tower is a custom model that is not Llama: a stack of residual blocks
// x ← x + W₂·silu(W₁·x)·(W₃·x), then a norm. Its blocks are the offload
// units ("blocks.0", "blocks.1", ...).
type Tower struct {
	nn.Base
	Blocks []*TowerBlock
	Norm   *nn.RMSNorm
}

// TowerBlock is one residual block.
type TowerBlock struct {
	nn.Base
	In, Gate, Out *nn.Linear
}

// NewTower builds a tower of depth blocks of width dim with random F32
// weights on the host device.
func NewTower(host runtime.Device, depth, dim, hidden int, seed uint64) (*Tower, error) {
	t := &Tower{}
	nn.Init(t, "")
	blocks := nn.NewContainer(t, "blocks")
	rng := rand.New(rand.NewPCG(seed, 1))
	fill := func(p *nn.Parameter, shape ...int) error {
		x, err := runtime.NewTensor(host, runtime.F32, shape, p.Name())
		if err != nil {
			return err
		}
		for i := range x.F32() {
			x.F32()[i] = float32(rng.NormFloat64()) / float32(dim)
		}
		return p.Bind(x)
	}
	for i := 0; i < depth; i++ {
		b := &TowerBlock{}
		nn.Attach(blocks, fmt.Sprint(i), b)
		b.In = nn.NewLinear(b, "in", dim, hidden)
		b.Gate = nn.NewLinear(b, "gate", dim, hidden)
		b.Out = nn.NewLinear(b, "out", hidden, dim)
		for _, l := range []*nn.Linear{b.In, b.Gate, b.Out} {
			if err := fill(l.Weight, l.Out, l.In); err != nil {
				return nil, err
			}
		}
		t.Blocks = append(t.Blocks, b)
	}
	t.Norm = nn.NewRMSNorm(t, "norm", dim, 1e-6)
	if err := fill(t.Norm.Weight, dim); err != nil {
		return nil, err
	}
	return t, nil
}

// Forward runs x [T, dim] through the tower into a new tensor on the
// backend's device. Every module call goes through nn.Call (via the
// modules' Forward methods), which is where the offload traps sit.
func (t *Tower) Forward(b kernels.Backend, x *runtime.Tensor) (*runtime.Tensor, error) {
	T, dim := x.Dim(0), x.Dim(1)
	hidden := t.Blocks[0].In.Out
	alloc := func(label string, shape ...int) (*runtime.Tensor, error) {
		return runtime.NewTensor(b.Device(), runtime.F32, shape, label)
	}
	var out *runtime.Tensor
	err := nn.Call(t, func() error {
		h, err := alloc("h", T, dim)
		if err != nil {
			return err
		}
		defer h.Buffer().Free()
		copy(h.F32(), x.F32())
		a, err := alloc("a", T, hidden)
		if err != nil {
			return err
		}
		defer a.Buffer().Free()
		g, err := alloc("g", T, hidden)
		if err != nil {
			return err
		}
		defer g.Buffer().Free()
		o, err := alloc("o", T, dim)
		if err != nil {
			return err
		}
		defer o.Buffer().Free()
		for _, blk := range t.Blocks {
			err := nn.Call(blk, func() error {
				if err := blk.In.Forward(b, a, h); err != nil {
					return err
				}
				if err := blk.Gate.Forward(b, g, h); err != nil {
					return err
				}
				if err := b.SiLUMul(a, g, a); err != nil {
					return err
				}
				if err := blk.Out.Forward(b, o, a); err != nil {
					return err
				}
				return b.Add(h, h, o)
			})
			if err != nil {
				return err
			}
		}
		if out, err = alloc("out", T, dim); err != nil {
			return err
		}
		return t.Norm.Forward(b, out, h)
	})
	return out, err
}

// Example_customModel offloads a model that is not Llama through the public
// API: the units are its blocks, the budget holds five of eight, and the
// results equal the resident model's.
func Example_customModel() {
	host := runtime.NewCPU(0) // where the weights are built
	gpu := runtime.NewCPU(0)  // the compute device (a GPU with the cuda build)
	tower, err := NewTower(host, 8, 64, 128, 42)
	if err != nil {
		panic(err)
	}
	x, _ := runtime.NewTensor(host, runtime.F32, runtime.Shape{3, 64}, "x")
	for i := range x.F32() {
		x.F32()[i] = float32(i%7) - 3
	}
	hostKernels, _ := kernels.NewCPUBackend(host)
	want, _ := tower.Forward(hostKernels, x)

	cfg := offload.DefaultConfig(gpu)
	cfg.Include = []string{"blocks.*"}
	cfg.GPUBudget = offload.Budget{Bytes: 5 * 98560} // five blocks' worth: two transfer slots and three resident blocks
	cfg.TransferBlocks = 2
	if err := offload.Offload(tower, &cfg, "tower"); err != nil {
		panic(err)
	}
	gpuKernels, _ := kernels.NewCPUBackend(gpu)
	xs, _ := runtime.NewTensor(gpu, runtime.F32, runtime.Shape{3, 64}, "x on device")
	copy(xs.F32(), x.F32())
	same := true
	for pass := 0; pass < 5; pass++ { // discovery, 2× profiling, then inference
		got, err := tower.Forward(gpuKernels, xs)
		if err != nil {
			panic(err)
		}
		for i, v := range got.F32() {
			same = same && v == want.F32()[i]
		}
		got.Buffer().Free()
	}
	mgr := offload.GetOffloadManager("tower")
	fmt.Println("phase:", mgr.Phase())
	fmt.Println("streamed:", len(offload.OffloadUnits("tower")), "resident:", len(offload.ResidentUnits("tower")))
	fmt.Println("same as resident:", same)
	if err := offload.Release("tower", true); err != nil {
		panic(err)
	}
	xs.Buffer().Free()
	fmt.Println("device bytes after release:", gpu.Memory().InUse)
	// Output:
	// phase: INFERENCE
	// streamed: 5 resident: 3
	// same as resident: true
	// device bytes after release: 0
}
