package all_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestStreamExp4: a model offloaded with StreamExp4 on a CPU "device"
// (the CPU backend unpacking on the copy stream) streams its layers packed
// — the plan times each streamed layer's copy by fewer bytes than the
// layer's, and its transfer blocks hold both forms — and gives the
// resident run's logits within 1e-5 and its greedy tokens: all layers
// streamed through one block, and with the host placement too (layer 1
// on the host, the others resident or streamed packed). For every dense
// family.
func TestStreamExp4(t *testing.T) {
	for _, fx := range batchFixtures {
		for _, host := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/host-%v", fx.family, host), func(t *testing.T) {
				prompt := []int32{3, 17, 42, 5, 9}
				const steps = 5
				hostDev, rb := cpu(t)
				resident := load(t, fx.dir, hostDev)
				want := testmodel.Run(t, resident, rb, prompt, steps)
				fp, err := offload.Measure(resident, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				dev, cb := offloadDevice(t)
				defer dev.Close()
				cfg := offload.DefaultConfig(dev)
				if host { // layer 1 on the host
					cfg = hybridConfig(t, resident, dev, hostBackend(t), 1)
				}
				cfg.GPUBudget, cfg.TransferBlocks = fp.Min(1), 1 // the least budget: one block, with room for a packed copy (Min)
				cfg.StreamExp4, cfg.Unpacker = true, cb
				m := load(t, fx.dir, hostDev)
				mgr, release := offloadAs(t, m, &cfg, fmt.Sprintf("%s-exp4-%v", fx.family, host))
				defer release()
				sb := strictBackend{cb, dev}
				testmodel.Run(t, m, sb, prompt, steps) // discovery and profiling
				got := testmodel.Run(t, m, sb, prompt, steps)
				matchResident(t, got, want)
				for i := range want {
					if g, w := kernels.Argmax(got[i]), kernels.Argmax(want[i]); g != w {
						t.Fatalf("step %d: greedy token %d, want %d", i, g, w)
					}
				}
				plan, err := mgr.Plan()
				if err != nil {
					t.Fatal(err)
				}
				in, err := mgr.PlanInput()
				if err != nil {
					t.Fatal(err)
				}
				streamed := 0
				for u, pu := range in.Units {
					if plan.Resident[u] || plan.IsHost(u) {
						continue
					}
					streamed++
					if pu.CopyBytes <= 0 || pu.CopyBytes >= pu.Bytes || plan.SlotBytes < pu.Bytes+pu.CopyBytes {
						t.Errorf("streamed unit %s: %d bytes, copies of %d, blocks of %d: want a packed copy smaller than the unit and blocks holding both",
							pu.Name, pu.Bytes, pu.CopyBytes, plan.SlotBytes)
					}
				}
				if streamed == 0 || (host && len(mgr.HostUnits()) == 0) {
					t.Fatalf("plan: %d streamed, host units %v", streamed, unitNames(mgr.HostUnits()))
				}
			})
		}
	}
}

// TestStreamExp4Config: StreamExp4 without an Unpacker, or with an FP8
// stream dtype, is an Offload error naming the setting.
func TestStreamExp4Config(t *testing.T) {
	hostDev, _ := cpu(t)
	dev, cb := offloadDevice(t)
	defer dev.Close()
	for _, c := range []struct {
		name string
		set  func(*offload.Config)
		want string
	}{
		{"no unpacker", func(c *offload.Config) { c.StreamExp4 = true }, "needs an Unpacker"},
		{"fp8", func(c *offload.Config) { c.StreamExp4, c.Unpacker, c.StreamDType = true, cb, runtime.F8E4M3 }, "not with stream dtype"},
	} {
		m := load(t, batchFixtures[0].dir, hostDev)
		cfg := offload.DefaultConfig(dev)
		c.set(&cfg)
		err := offload.Offload(m, &cfg, "exp4-config-"+c.name)
		if err == nil {
			offload.Release("exp4-config-"+c.name, true)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}
