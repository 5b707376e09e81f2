//go:build cuda

package cuda

import (
	"fmt"
	"os"
	"strings"
	"sync"
)

// FT_SKIP_KERNELS is a timing diagnostic, never a way to run a model: a
// comma-separated list of kernel-name prefixes whose launches are dropped
// (Launch returns nil without enqueueing anything). Timing a decode step
// with, say, FT_SKIP_KERNELS=rope_,rmsnorm tells what those kernels cost
// inside the replayed graph (with dependent launch and the launches around
// them), which a kernel profile of serialized launches cannot: the upper
// bound of what fusing them away would gain. Every result computed with it
// is wrong, so a process that skips says so on stderr once.
var skipPrefixes = sync.OnceValue(func() []string {
	var out []string
	for _, p := range strings.Split(os.Getenv("FT_SKIP_KERNELS"), ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	if len(out) > 0 {
		fmt.Fprintf(os.Stderr, "FT_SKIP_KERNELS=%s: launches of kernels named %s… are dropped; results are wrong (a timing diagnostic)\n",
			os.Getenv("FT_SKIP_KERNELS"), strings.Join(out, "…, "))
	}
	return out
})

// skipped is whether FT_SKIP_KERNELS drops launches of the kernel name.
func skipped(name string) bool {
	for _, p := range skipPrefixes() {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
