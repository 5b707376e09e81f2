package all_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/offload"
)

// TestEmbedHostFamilies: every family fixture (Llama, Qwen2, Qwen3 with its
// embedding tied to the LM head, Mistral, the MoE ones) offloaded onto a
// CPU compute device with layers streaming: an untied table is kept in
// mapped host memory (offload.HostMappedParams) and the tied one on the
// device, and the logits of a prefill and decode steps equal the resident
// model's bit for bit either way.
func TestEmbedHostFamilies(t *testing.T) {
	for _, fx := range []struct {
		dir  string
		tied bool
	}{
		{"../../testdata/tiny-llama", false},
		{"../../testdata/tiny-qwen2", false},
		{"../../testdata/tiny-qwen3", true},
		{"../../testdata/tiny-mistral", false},
		{"../../testdata/tiny-mixtral", false},
		{"../../testdata/tiny-qwen3moe", false},
	} {
		t.Run(fx.dir[strings.LastIndex(fx.dir, "/")+1:], func(t *testing.T) {
			host, hb := cpu(t)
			probe := load(t, fx.dir, host)
			if probe.Cfg.TieWordEmbeddings != fx.tied {
				t.Fatalf("fixture tie_word_embeddings = %v, the test expects %v", probe.Cfg.TieWordEmbeddings, fx.tied)
			}
			prompt := []int32{5, 17, 42, 99, 3, 64, 7, 11, 2}
			want := testmodel.Run(t, probe, hb, prompt, 4)
			fp, err := offload.Measure(probe, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			m := load(t, fx.dir, host)
			dev, cb := offloadDevice(t)
			defer dev.Close()
			name := fmt.Sprintf("%s-%d", t.Name(), len(fp.UnitBytes))
			cfg := offload.DefaultConfig(dev)
			cfg.GPUBudget = offload.Budget{Bytes: fp.MinBudget(2)}
			cfg.TransferBlocks = 2
			cfg.OffloadTiming = offload.TimingEager
			_, release := offloadAs(t, m, &cfg, name)
			defer release()
			got := testmodel.Run(t, m, strictBackend{cb, dev}, prompt, 4)
			for i := range want {
				if !slices.Equal(got[i], want[i]) {
					t.Fatalf("pass %d: offloaded logits differ from resident ones by %.3g", i, maxDiff(got[i], want[i]))
				}
			}
			if len(offload.OffloadUnits(name)) == 0 {
				t.Fatal("nothing streams at the smallest budget")
			}
			embed := m.Embed.Weight
			var wantMapped []string
			if !fx.tied {
				wantMapped = []string{embed.Name()}
			}
			if got := offload.HostMappedParams(name); !slices.Equal(got, wantMapped) {
				t.Errorf("host-mapped parameters %q, want %q", got, wantMapped)
			}
			usage, err := offload.GetGPUMemoryUsage(name)
			if err != nil {
				t.Fatal(err)
			}
			wantBytes := embed.Peek().NumBytes()
			if fx.tied {
				wantBytes = 0
			}
			if usage.HostMappedBytes != wantBytes {
				t.Errorf("mapped %d bytes, want %d (tied %v)", usage.HostMappedBytes, wantBytes, fx.tied)
			}
		})
	}
}
