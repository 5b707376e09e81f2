package offload_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/models"
	_ "github.com/flextensor-go/flextensor/models/all" // every architecture of the fixtures
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestMinBudgetAtLeastFloor: over the fixtures (dense and MoE, with the
// model's own units and, for MoE, an include that makes each attention
// block and each expert a unit), with one and two transfer blocks,
// MinBudget is at least the planner's floor (leastBudget) of the
// footprint's units with its non-unit weights on the device, and
// Footprint.Min passes Offload's pre-flight check, MinBudget at least the
// floor that check holds a budget to (leastPlan): "stream everything" is
// never refused as below the least plan. The MoE models' experts count
// a pool slot with the custom include too (Footprint.UnitAnnounced).
func TestMinBudgetAtLeastFloor(t *testing.T) {
	moeInclude := map[string][]string{
		"tiny-mixtral":  {"model.layers.*.self_attn", "model.layers.*.block_sparse_moe.experts.*"},
		"tiny-qwen3moe": {"model.layers.*.self_attn", "model.layers.*.mlp.experts.*"},
	}
	for _, fx := range []string{"tiny-llama", "tiny-qwen3", "tiny-mixtral", "tiny-qwen3moe"} {
		includes := [][]string{nil}
		if moeInclude[fx] != nil {
			includes = append(includes, moeInclude[fx])
		}
		for _, include := range includes {
			for _, slots := range []int{1, 2} {
				t.Run(fmt.Sprintf("%s/%v/%d", fx, include, slots), func(t *testing.T) {
					dev := runtime.NewCPU(0)
					defer dev.Close()
					m, ck, err := models.Load("../testdata/"+fx, dev)
					if err != nil {
						t.Fatal(err)
					}
					defer ck.Close()
					defer m.Close()
					fp, err := offload.Measure(m, include, nil)
					if err != nil {
						t.Fatal(err)
					}
					if ff := offload.FootprintFloor(fp, slots); fp.MinBudget(slots) < ff {
						t.Errorf("MinBudget(%d) = %d below the planner's floor of the footprint's units, %d", slots, fp.MinBudget(slots), ff)
					}
					if include != nil {
						// with the custom include: the experts are announced, the attention blocks not
						experts := 0
						for i, name := range fp.UnitNames {
							expert := strings.Contains(name, ".experts.")
							if expert {
								experts++
							}
							if fp.UnitAnnounced[i] != expert {
								t.Errorf("unit %s: announced %v, want %v", name, fp.UnitAnnounced[i], expert)
							}
						}
						if experts == 0 {
							t.Errorf("units %v: no expert", fp.UnitNames)
						}
					} else if fp.ModelUnits != (moeInclude[fx] != nil) {
						t.Errorf("footprint %+v: ModelUnits %v, want it for the MoE models' own units only", fp, fp.ModelUnits)
					}
					cfg := offload.DefaultConfig(dev)
					cfg.Include, cfg.TransferBlocks, cfg.GPUBudget = include, slots, fp.Min(slots)
					name := uniqueName(t)
					if err := offload.Offload(m, &cfg, name); err != nil {
						t.Fatalf("Offload with MinBudget(%d) = %d: %v", slots, fp.MinBudget(slots), err)
					}
					defer offload.Release(name, true)
					floor, err := offload.PreflightFloor(name)
					if err != nil || floor > fp.MinBudget(slots) {
						t.Errorf("MinBudget(%d) = %d below the pre-flight floor %d (%v)", slots, fp.MinBudget(slots), floor, err)
					}
				})
			}
		}
	}
}
