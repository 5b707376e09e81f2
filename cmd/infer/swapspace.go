package main

import (
	"fmt"

	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// swapSpaceHelp is --swap-space's help (serve and run-model --batch-file).
const swapSpaceHelp = "batched runs: host memory that preempted requests' KV blocks are swapped out to (and back, bit for bit) instead of being recomputed when the KV cache runs short, as bytes (4GiB), 0 for none (recompute); taken only as preemptions need it (default: 4GiB on a GPU, at most a quarter of the host's available memory; on the CPU as much as the KV cache, at most a quarter of available host memory; once taken it is kept until exit)"

// defaultGPUSwap is --swap-space's default on a GPU.
const defaultGPUSwap = 4 << 30

// parseSwapSpace checks a --swap-space value: "" is the default (set
// false), else bytes with a unit or a whole number, 0 for none.
func parseSwapSpace(flag string) (bytes int64, set bool, err error) {
	if flag == "" {
		return 0, false, nil
	}
	b, err := offload.ParseBudget(flag)
	if err != nil {
		return 0, false, usagef("--swap-space: %v", err)
	}
	if b.Fraction > 0 {
		return 0, false, usagef("--swap-space %s: give bytes (4GiB), or 0 for none; a fraction of host memory is not taken", flag)
	}
	return b.Bytes, true, nil
}

// swapSpaceBytes is the scheduler's swap area (generate.Options.SwapBytes)
// for a --swap-space value on dev beside a KV cache of cacheBytes. The
// default: on a GPU 4 GiB, capped at a quarter of the host memory
// available, which costs nothing until a preemption swaps (the area is
// pinned as it fills) and saves the re-prefill on the GPU's compute; on
// the CPU the "host" copy is a memcpy within the same memory, far cheaper
// than a prefill there, so swapping is the normal path too, bounded by the
// cache's own size. Either way at most a quarter of the host memory
// available: the area, once taken, is kept until the cache closes.
func swapSpaceBytes(flag string, dev runtime.Device, cacheBytes int64) (int64, error) {
	n, set, err := parseSwapSpace(flag)
	if err != nil || set {
		return n, err
	}
	n = defaultGPUSwap
	if dev.Kind() != runtime.KindCUDA {
		n = cacheBytes
	}
	if avail := runtime.HostMemAvailable(); avail > 0 {
		n = min(n, avail/4)
	}
	return n, nil
}

// swapReport is what a run's summary says of its preemptions and swaps.
func swapReport(preemptions, swaps int64) string {
	if preemptions == 0 {
		return ""
	}
	return fmt.Sprintf(", %d preemptions (%d swapped out to host memory, %d re-prefilled; a larger --kv-cache avoids them, a larger --swap-space swaps more)",
		preemptions, swaps, preemptions-swaps)
}
