//go:build cuda

package main

import (
	"strings"
	"testing"
)

// TestKernelsCommand: infer kernels writes the compiled kernels once; a
// second run finds them.
func TestKernelsCommand(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := run(t, "kernels", "--out", dir)
	if code != 0 || !strings.Contains(out, "(1 file(s), 1 new)") {
		t.Fatalf("first run: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = run(t, "kernels", "--out", dir)
	if code != 0 || !strings.Contains(out, "(1 file(s), 0 new)") {
		t.Fatalf("second run: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
