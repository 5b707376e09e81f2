//go:build !cuda

package main

import (
	"strings"
	"testing"
)

func TestKernelsCommandWithoutCUDA(t *testing.T) {
	code, _, errOut := run(t, "kernels", "--out", t.TempDir())
	if code != 1 || !strings.Contains(errOut, "built without CUDA") {
		t.Fatalf("exit %d, stderr %q: want 1 and a built-without-CUDA message", code, errOut)
	}
	code, _, errOut = run(t, "kernels", "--device", "cpu")
	if code != 2 || !strings.Contains(errOut, "want cuda:N") {
		t.Fatalf("--device cpu: exit %d, stderr %q: want a usage error", code, errOut)
	}
}
