package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRunModelRandomSeed: a sampled run without --seed draws its seed at
// random (two runs differ in seed), reports it on stderr and in --json, and
// --seed with the reported value repeats the run's tokens; a greedy run
// reports no seed; a batch line without a seed gets its own, reported in
// its result line, which repeats it alone.
func TestRunModelRandomSeed(t *testing.T) {
	type result struct {
		Seed *uint64 `json:"seed"`
		G    []int32 `json:"generated_ids"`
	}
	runJSON := func(args ...string) (result, string) {
		t.Helper()
		code, o, e := run(t, append([]string{"run-model", "--json", "--ignore-eos", "--token-ids", "5,6,7", "--max-new-tokens", "12"}, args...)...)
		if code != 0 {
			t.Fatalf("run-model %v: exit %d: %s", args, code, e)
		}
		var r result
		if err := json.Unmarshal([]byte(o), &r); err != nil {
			t.Fatal(err)
		}
		return r, e
	}
	a, errA := runJSON("--temperature", "1.5")
	b, _ := runJSON("--temperature", "1.5")
	if a.Seed == nil || b.Seed == nil {
		t.Fatalf("sampled runs without --seed report no seed: %+v, %+v", a, b)
	}
	if *a.Seed == *b.Seed {
		t.Errorf("two sampled runs drew the same seed %d", *a.Seed)
	}
	if want := fmt.Sprintf("--seed %d repeats this run", *a.Seed); !strings.Contains(errA, want) {
		t.Errorf("stderr %q does not say %q", errA, want)
	}
	again, errAgain := runJSON("--temperature", "1.5", "--seed", fmt.Sprint(*a.Seed))
	if !slices.Equal(again.G, a.G) || again.Seed == nil || *again.Seed != *a.Seed {
		t.Errorf("--seed %d gave %v (seed %v); the run it repeats gave %v", *a.Seed, again.G, again.Seed, a.G)
	}
	if strings.Contains(errAgain, "drawn at random") {
		t.Errorf("a run with --seed says it drew one: %q", errAgain)
	}
	if g, e := runJSON(); g.Seed != nil || strings.Contains(e, "seed") {
		t.Errorf("a greedy run reports a seed: %+v, stderr %q", g, e)
	}

	in := writeBatch(t,
		`{"token_ids": [5, 6, 7], "max_new_tokens": 12, "temperature": 1.5, "ignore_eos": true}`,
		`{"token_ids": [5, 6, 7], "max_new_tokens": 12, "temperature": 1.5, "ignore_eos": true}`,
		`{"token_ids": [5, 6, 7], "max_new_tokens": 12, "temperature": 1.5, "seed": 3, "ignore_eos": true}`,
		`{"token_ids": [5, 6, 7], "max_new_tokens": 2}`,
	)
	out := filepath.Join(t.TempDir(), "results.jsonl")
	if code, _, e := run(t, "run-model", "--batch-file", in, "--out", out); code != 0 {
		t.Fatalf("batch: exit %d: %s", code, e)
	}
	res := readResults(t, out)
	if len(res) != 4 || res[0].Seed == nil || res[1].Seed == nil || res[2].Seed == nil || *res[2].Seed != 3 || res[3].Seed != nil {
		t.Fatalf("batch results' seeds: %+v", res)
	}
	if *res[0].Seed == *res[1].Seed {
		t.Errorf("two batch lines without a seed drew the same one, %d", *res[0].Seed)
	}
	if alone, _ := runJSON("--temperature", "1.5", "--seed", fmt.Sprint(*res[1].Seed)); !slices.Equal(alone.G, res[1].GeneratedIDs) {
		t.Errorf("batch line 2 (seed %d) gave %v; alone with that seed %v", *res[1].Seed, res[1].GeneratedIDs, alone.G)
	}
}
