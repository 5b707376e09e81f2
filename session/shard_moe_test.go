package session_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/session"
)

// TestShardedMoEDenseLayer: a Qwen3-MoE whose layer 1 is dense
// (mlp_only_layers; random weights) sharded over 2 and 4 CPU devices,
// resident and everything streamed: the sparse layers split by experts,
// the dense one by intermediate columns, and the logits and greedy tokens
// are the single device's.
func TestShardedMoEDenseLayer(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "qwen3moe-tiny")
	if err := models.MakeCheckpoint(dir, "qwen3moe-tiny", 0, 11, 64<<10); err != nil {
		t.Fatal(err)
	}
	one, err := session.Open(dir, "cpu", session.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := runShardCase(t, one)
	one.Close()
	for _, n := range []int{2, 4} {
		for _, budget := range []string{"", "0"} {
			t.Run(fmt.Sprintf("n%d-budget%q", n, budget), func(t *testing.T) {
				devs := make([]string, n)
				for i := range devs {
					devs[i] = fmt.Sprintf("cpu:%d", i)
				}
				s, err := session.Open(dir, strings.Join(devs, ","), session.Options{GPUBudget: budget})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				for r, sh := range s.Model.Shards() {
					if sh.Layers[1].MLP == nil || sh.Layers[1].MoE != nil || sh.Cfg.IntermediateSize != 160/n {
						t.Fatalf("shard %d: layer 1 is not a dense MLP of %d columns (%s)", r, 160/n, sh.Cfg.Summary())
					}
					for _, l := range []int{0, 2} {
						blk := sh.Layers[l].MoE
						if blk == nil || blk.First != r*16/n || len(blk.Experts) != 16/n {
							t.Fatalf("shard %d layer %d: experts from %d, %d of them; want %d from %d", r, l, blk.First, len(blk.Experts), 16/n, r*16/n)
						}
					}
				}
				got := runShardCase(t, s)
				closeTo(t, "all positions", got.all, want.all)
				for i := range want.steps {
					closeTo(t, fmt.Sprintf("step %d", i), got.steps[i], want.steps[i])
				}
				if !slices.Equal(got.greedy, want.greedy) {
					t.Errorf("greedy tokens %v, single device %v", got.greedy, want.greedy)
				}
			})
		}
	}
}
