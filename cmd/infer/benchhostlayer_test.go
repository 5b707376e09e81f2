package main

import (
	"strings"
	"testing"
)

// TestBenchHostLayerMemory: bench-host --layer says which memory its
// weights are in: by default huge-page memory mapped as the engine's
// pinned blocks (where the engine's host units read), with --layer-pinned
// heap the Go heap; both time the layer.
func TestBenchHostLayerMemory(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "in huge-page host memory mapped as the engine's pinned blocks"},
		{[]string{"--layer-pinned", "heap"}, "in Go heap"},
	} {
		args := append([]string{"bench-host", "--layer", "--layer-scale", "32", "--layer-iters", "1", "--threads", "1", "--context", "16"}, c.args...)
		code, out, errOut := run(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, errOut)
		}
		if !strings.Contains(out, c.want) || !strings.Contains(out, "layer as placed") {
			t.Fatalf("%v: output lacks %q and the layer's time:\n%s", c.args, c.want, out)
		}
	}
}
