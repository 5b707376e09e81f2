//go:build !cuda

package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestCUDADeviceWithoutCUDA(t *testing.T) {
	var out, errb bytes.Buffer
	code := runMain([]string{"run-model", "--device", "cuda:0", "--token-ids", "1,2,3", "--max-new-tokens", "1"}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "built without CUDA") || !strings.Contains(errb.String(), "make build-cuda") {
		t.Fatalf("exit %d, stderr %q: want 1 and a built-without-CUDA message", code, errb.String())
	}
	code = runMain([]string{"run-model", "--device", "gpu", "--token-ids", "1"}, &out, &errb)
	if code != 2 {
		t.Fatalf("--device gpu: exit %d, want 2 (usage)", code)
	}
}
