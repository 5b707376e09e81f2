package main

import (
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestSwapSpaceBytes: --swap-space takes bytes with a unit or a whole
// number (0: none); unset, the CPU's default is the KV cache's size, at
// most a quarter of the host memory available; a fraction or a word is an
// error naming the flag.
func TestSwapSpaceBytes(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	for flag, want := range map[string]int64{"": 12345, "0": 0, "2GiB": 2 << 30, "1000": 1000, "1.5KiB": 1536} {
		got, err := swapSpaceBytes(flag, dev, 12345)
		if err != nil || got != want {
			t.Errorf("--swap-space %q: %d, %v; want %d", flag, got, err, want)
		}
	}
	if a1 := runtime.HostMemAvailable(); a1 > 0 {
		huge := 4 * a1
		got, err := swapSpaceBytes("", dev, huge)
		a2 := runtime.HostMemAvailable() // the available memory moves between reads
		if err != nil || got < min(a1, a2)/4 || got > max(a1, a2)/4 {
			t.Errorf("default beside a KV cache of %d bytes: %d, %v; want a quarter of the %d–%d available", huge, got, err, a1, a2)
		}
	}
	for _, flag := range []string{"lots", "0.5", "-1GiB"} {
		if _, err := swapSpaceBytes(flag, dev, 12345); err == nil || !strings.Contains(err.Error(), "--swap-space") {
			t.Errorf("--swap-space %q: %v, want an error naming the flag", flag, err)
		}
	}
}
