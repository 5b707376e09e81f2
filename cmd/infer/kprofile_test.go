package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

func TestKernelProfileOnCPUSaysWhy(t *testing.T) {
	code, _, errOut := run(t, "bench", "--device", "cpu", "--budgets", "resident", "--context", "4", "--iters", "1", "--warmup", "0", "--kernel-profile")
	if code != 1 || !strings.Contains(errOut, "cannot time kernels") {
		t.Fatalf("exit %d, stderr %q: want exit 1 saying the CPU cannot time kernels", code, errOut)
	}
}

func TestKernelTableGroupsByName(t *testing.T) {
	var b bytes.Buffer
	printKernelTable(&b, "one step", []runtime.KernelRecord{
		{Name: "gemv", Bytes: 2e9, Ms: 1},
		{Name: "norm", Ms: 0.5},
		{Name: "gemv", Bytes: 2e9, Ms: 1},
	})
	out := b.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("table:\n%s\nwant a title, a header and two rows", out)
	}
	if !strings.Contains(lines[0], "3 launches, 2.500 ms") {
		t.Errorf("title %q: want 3 launches, 2.500 ms", lines[0])
	}
	f := strings.Fields(lines[2])
	if f[0] != "gemv" || f[1] != "2" || f[2] != "2.000" || f[len(f)-1] != "2000" {
		t.Errorf("gemv row %q: want 2 calls, 2.000 ms, 2000 GB/s (4e9 bytes in 2 ms)", lines[2])
	}
	if f := strings.Fields(lines[3]); f[0] != "norm" || f[len(f)-1] != "-" {
		t.Errorf("norm row %q: want no bandwidth for a kernel that moves no stated bytes", lines[3])
	}
}
