package main

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestRunModelMoEOffloaded: run-model offloads tiny-mixtral and
// tiny-qwen3moe with their own units (attention, each expert) at "0"
// (everything streams: one ring and one pool slot) and at a budget where
// most experts stream, generates transformers' greedy continuation, and
// reports the expert cache: a line with the hit rate, the JSON fields, and
// with --offload-timing the table's announced-unit rows.
func TestRunModelMoEOffloaded(t *testing.T) {
	for _, dir := range []string{"../../testdata/tiny-mixtral", "../../testdata/tiny-qwen3moe"} {
		data, err := os.ReadFile(dir + "/reference.json")
		if err != nil {
			t.Fatal(err)
		}
		var ref refFile
		if err := json.Unmarshal(data, &ref); err != nil {
			t.Fatal(err)
		}
		for _, budget := range []string{"0", "300KiB"} {
			args := []string{"run-model", "--model", dir, "--token-ids", joinInts(ref.GreedyPrompt), "--max-new-tokens", "24",
				"--ignore-eos", "--gpu-budget", budget}
			code, out, errOut := run(t, append(args, "--offload-timing")...)
			if code != 0 {
				t.Fatalf("%s at %s: exit %d: %s", dir, budget, code, errOut)
			}
			if !strings.Contains(out, "generated: "+joinInts(ref.GreedyContinuation)) {
				t.Errorf("%s at %s: %s\nwant generated: %s", dir, budget, out, joinInts(ref.GreedyContinuation))
			}
			for _, want := range []string{"expert cache: hit rate", ".experts.*", "streamed calls miss", "per token", "self_attn"} {
				if !strings.Contains(errOut, want) {
					t.Errorf("%s at %s: stderr lacks %q:\n%s", dir, budget, want, errOut)
				}
			}
			code, out, errOut = run(t, append(args, "--json")...)
			if code != 0 {
				t.Fatalf("%s at %s --json: exit %d: %s", dir, budget, code, errOut)
			}
			var got struct {
				GeneratedIDs []int32  `json:"generated_ids"`
				HitRate      *float64 `json:"expert_hit_rate"`
				Calls        int64    `json:"expert_calls"`
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.GeneratedIDs, ref.GreedyContinuation) || got.HitRate == nil || got.Calls == 0 {
				t.Errorf("%s at %s --json: %s", dir, budget, out)
			}
		}
	}
}
