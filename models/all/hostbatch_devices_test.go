package all_test

import (
	"fmt"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestBatchHostEveryDevice: on every device (the CPU, and the GPU in a cuda
// build), each dense fixture (host placement does not combine with
// announced experts: offload refuses it) offloaded with every layer streamed but one
// computed on the host CPU (Config.HostUnits) gives, batched (sequences of
// mixed lengths joining and finishing at different steps, the host layer
// over the paged cache's mirror on the host), each sequence's logits run
// alone through the same offloaded model within the device's tolerance and
// the same greedy tokens.
func TestBatchHostEveryDevice(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		for _, fx := range batchFixtures {
			t.Run(fx.family, func(t *testing.T) {
				host := runtime.NewCPU(0)
				defer host.Close()
				hb := hostBackendPasses(t, 3) // before the model: its cleanup runs after the model's frees the host workspace
				m := load(t, fx.dir, host)
				cfg := hybridConfig(t, m, d.Dev, hb, 1) // model.layers.1 on the host
				name := fmt.Sprintf("%s-%s", t.Name(), d.Name)
				mgr, release := offloadAs(t, m, &cfg, name)
				defer release()
				ps := plans(m.Cfg.VocabSize)
				want := runAlone(t, m, d.Backend, ps)
				cache, err := m.NewPagedCache(d.Backend, 64, 16)
				if err != nil {
					t.Fatal(err)
				}
				defer cache.Close()
				got := runBatched(t, m, d.Backend, cache, ps)
				if h := unitNames(mgr.HostUnits()); len(h) != 1 || h[0] != "model.layers.1" {
					t.Fatalf("host units %v, want model.layers.1", h)
				}
				if n := len(mgr.OffloadUnits()); n == 0 {
					t.Errorf("no layer streams (the test means every other layer to)")
				}
				for i := range want {
					if len(got[i]) != len(want[i]) {
						t.Fatalf("sequence %d: %d forwards batched, %d alone", i, len(got[i]), len(want[i]))
					}
					for s := range want[i] {
						devtest.Close(t, got[i][s], want[i][s], d.Tol.Abs, d.Tol.Rel)
						if g, w := kernels.Argmax(got[i][s]), kernels.Argmax(want[i][s]); g != w {
							t.Errorf("sequence %d forward %d: greedy token %d batched, %d alone", i, s, g, w)
						}
					}
				}
				if cache.FreeBlocks() != cache.TotalBlocks() {
					t.Errorf("%d of %d blocks free at the end", cache.FreeBlocks(), cache.TotalBlocks())
				}
			})
		}
	})
}
