package main

import (
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestSwapSpaceBytes: --swap-space takes bytes with a unit or a whole
// number (0: none); unset, the CPU's default is the KV cache's size; a
// fraction or a word is an error naming the flag.
func TestSwapSpaceBytes(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	for flag, want := range map[string]int64{"": 12345, "0": 0, "2GiB": 2 << 30, "1000": 1000, "1.5KiB": 1536} {
		got, err := swapSpaceBytes(flag, dev, 12345)
		if err != nil || got != want {
			t.Errorf("--swap-space %q: %d, %v; want %d", flag, got, err, want)
		}
	}
	for _, flag := range []string{"lots", "0.5", "-1GiB"} {
		if _, err := swapSpaceBytes(flag, dev, 12345); err == nil || !strings.Contains(err.Error(), "--swap-space") {
			t.Errorf("--swap-space %q: %v, want an error naming the flag", flag, err)
		}
	}
}
