package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestRunModelStreamDType: --stream-dtype fp8 with a budget streams FP8
// layers and generates; a bad value, fp8 without a budget and fp8 with a
// profile are usage errors naming the flag.
func TestRunModelStreamDType(t *testing.T) {
	code, out, errOut := run(t, "run-model", "--model", "../../testdata/tiny-llama", "--token-ids", "1,2,3,4", "--max-new-tokens", "6",
		"--json", "--device-memory", "2MiB", "--gpu-budget", "1MiB", "--stream-dtype", "fp8")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got struct {
		GeneratedIDs []int32 `json:"generated_ids"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.GeneratedIDs) != 6 {
		t.Fatalf("output %q (%v): want 6 generated ids", out, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--gpu-budget", "1MiB", "--stream-dtype", "fp4"}, `--stream-dtype "fp4"`},
		{[]string{"--stream-dtype", "fp8"}, "stream dtype fp8 applies to offloaded models"},
		{[]string{"--profile", t.TempDir(), "--stream-dtype", "fp8"}, "--stream-dtype fp8 does not apply with --profile"},
	} {
		code, _, errOut := run(t, append([]string{"run-model", "--token-ids", "1,2"}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %q; want exit 2 mentioning %q", c.args, code, errOut, c.want)
		}
	}
}

// TestInspectFP8: inspect reads FP8 checkpoints of both layouts: bytes by
// dtype include F8_E4M3 (and the block scales' F32), and units count the
// FP8 weights with their scales.
func TestInspectFP8(t *testing.T) {
	for dir, want := range map[string][]string{
		"../../testdata/tiny-llama-fp8-channel": {"F8_E4M3: 504.00 KiB", "BF16: 136.50 KiB", "model.layers.2"},
		"../../testdata/tiny-llama-fp8-block":   {"F8_E4M3: 504.00 KiB", "F32: ", "model.layers.2"},
	} {
		code, out, errOut := run(t, "inspect", "--model", dir)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", dir, code, errOut)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: inspect output lacks %q:\n%s", dir, w, out)
			}
		}
	}
}
