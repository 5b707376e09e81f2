package all_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestFamiliesEveryDevice: on every device, each family fixture's top-1
// token at every prompt position is transformers' (and so the CPU's: see
// TestGolden), its greedy continuation is transformers' (op by op and
// through the step graph), and the model offloaded onto the device with
// layers streaming gives the resident logits on that device.
func TestFamiliesEveryDevice(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		for _, fx := range fixtures {
			t.Run(fx.family, func(t *testing.T) {
				ref := readReference(t, fx.dir)
				m := load(t, fx.dir, d.Dev)
				checkTop1Greedy(t, m, d.Backend, ref)

				prompt, steps := ref.LongPrompt, 6
				want := testmodel.Run(t, m, d.Backend, prompt, steps)
				host := runtime.NewCPU(0)
				defer host.Close()
				off := load(t, fx.dir, host)
				unit, fixed, _ := unitBytes(t, off)
				name := fmt.Sprintf("%s-every-device", t.Name())
				cfg := offload.DefaultConfig(d.Dev)
				cfg.GPUBudget = offload.Budget{Bytes: fixed + 2*unit}
				cfg.TransferBlocks = 2
				if err := offload.Offload(off, &cfg, name); err != nil {
					t.Fatal(err)
				}
				defer func() {
					if err := offload.Release(name, true); err != nil {
						t.Error(err)
					}
				}()
				got := testmodel.Run(t, off, d.Backend, prompt, steps)
				if len(offload.OffloadUnits(name)) == 0 {
					t.Errorf("budget %d: no layer streams", cfg.GPUBudget.Bytes)
				}
				for i := range want {
					devtest.Close(t, got[i], want[i], d.Tol.Abs, d.Tol.Rel)
					if g, w := kernels.Argmax(got[i]), kernels.Argmax(want[i]); g != w {
						t.Errorf("pass %d: offloaded top-1 %d, resident %d", i, g, w)
					}
				}
			})
		}
	})
}

// checkTop1Greedy checks m on backend b against transformers' reference:
// the top-1 token at every position of each prompt, and the greedy
// continuation op by op (eager) and through the step path.
func checkTop1Greedy(t *testing.T, m *decoder.Model, b kernels.Backend, ref reference) {
	t.Helper()
	V := m.Cfg.VocabSize
	for p, ids := range ref.InputIDs {
		got := testmodel.Forward(t, m, b, ids, true)
		for i := range ids {
			g, w := kernels.Argmax(got[i*V:(i+1)*V]), kernels.Argmax(ref.Logits[p][i])
			if g != w {
				t.Errorf("prompt %d position %d: top-1 %d, transformers %d (max diff %.3g)", p, i, g, w, maxDiff(got[i*V:(i+1)*V], ref.Logits[p][i]))
			}
		}
	}
	for _, eager := range []bool{true, false} {
		got, err := m.Generate(b, ref.GreedyPrompt, decoder.GenerateOptions{MaxNewTokens: len(ref.GreedyContinuation), IgnoreEOS: true, Eager: eager})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, ref.GreedyContinuation) {
			t.Errorf("eager %v: greedy continuation\n got  %v\n want %v", eager, got, ref.GreedyContinuation)
		}
	}
}
