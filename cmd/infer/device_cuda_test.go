//go:build cuda

package main

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestRunModelCUDA: greedy generation through `infer run-model --device
// cuda:0` gives the CPU's tokens, for the reference prompt and the
// Makefile's.
func TestRunModelCUDA(t *testing.T) {
	gen := func(device, prompt string) []int32 {
		t.Helper()
		code, out, errOut := run(t, "run-model", "--device", device, "--token-ids", prompt, "--max-new-tokens", "20",
			"--ignore-eos", "--json")
		if code != 0 {
			t.Fatalf("--device %s: exit %d, stderr %s", device, code, errOut)
		}
		var got struct {
			GeneratedIDs []int32 `json:"generated_ids"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("output is not one JSON object: %v\n%s", err, out)
		}
		return got.GeneratedIDs
	}
	for _, prompt := range []string{"5,6,7,8,9,10,11,12", "37,235,396,72,255,393,203,133,335,448,144,129"} {
		cpu, gpu := gen("cpu", prompt), gen("cuda:0", prompt)
		t.Logf("prompt %s: cpu %v, cuda %v", prompt, cpu, gpu)
		if !slices.Equal(cpu, gpu) {
			t.Errorf("prompt %s: cuda:0 generated %v, the cpu %v", prompt, gpu, cpu)
		}
	}
}
