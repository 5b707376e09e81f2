//go:build cuda

package main

import (
	"strings"
	"testing"
)

// TestBenchMoEGraphCUDA: on the GPU, bench's resident decode of a
// mixture-of-experts model replays a captured whole step (the experts
// routed on the device), as for a dense model.
func TestBenchMoEGraphCUDA(t *testing.T) {
	for _, fixture := range []string{"tiny-mixtral", "tiny-qwen3moe"} {
		code, out, errOut := run(t, "bench", "--model", "../../testdata/"+fixture, "--device", "cuda:0", "--budgets", "resident",
			"--mode", "decode", "--context", "12", "--iters", "3", "--warmup", "1", "--kernel-profile")
		if code != 0 {
			t.Fatalf("%s: exit %d, stderr %s", fixture, code, errOut)
		}
		t.Logf("%s:\n%s", fixture, out)
		if !strings.Contains(out, "replayed as a CUDA graph") || !strings.Contains(out, "moe_gateup_bf16") {
			t.Errorf("%s: no graph replay line or no fused expert kernel in the profile:\n%s", fixture, out)
		}
	}
}
