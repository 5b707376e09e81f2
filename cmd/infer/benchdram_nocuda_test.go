//go:build !cuda

package main

import (
	"strings"
	"testing"
)

// TestBenchHostCopyDeviceWithoutCUDA: the DRAM probe's copies need a GPU;
// without CUDA in the build --copy-device cuda:0 says so.
func TestBenchHostCopyDeviceWithoutCUDA(t *testing.T) {
	code, _, errOut := run(t, "bench-host", "--copy-device", "cuda:0", "--read-mib", "1")
	if code != 1 || !strings.Contains(errOut, "--copy-device") || !strings.Contains(errOut, "built without CUDA") {
		t.Fatalf("exit %d, stderr %q: want 1 and a built-without-CUDA message naming --copy-device", code, errOut)
	}
}
