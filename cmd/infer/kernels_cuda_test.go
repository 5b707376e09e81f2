//go:build cuda

package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestKernelsCommand: infer kernels writes the compiled kernels once; a
// second run finds them.
func TestKernelsCommand(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := run(t, "kernels", "--out", dir)
	m := regexp.MustCompile(`\((\d+) file\(s\), (\d+) new\)`).FindStringSubmatch(out)
	if code != 0 || m == nil || m[1] == "0" || m[1] != m[2] {
		t.Fatalf("first run: exit %d, stdout %q, stderr %q; want every file new", code, out, errOut)
	}
	code, out, errOut = run(t, "kernels", "--out", dir)
	if want := "(" + m[1] + " file(s), 0 new)"; code != 0 || !strings.Contains(out, want) {
		t.Fatalf("second run: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
}
