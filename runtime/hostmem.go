package runtime

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// HostMemAvailable is the host memory the kernel says can be allocated
// without swapping (/proc/meminfo MemAvailable), in bytes; 0 when unknown
// (not Linux, or the file is unreadable).
func HostMemAvailable() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != "MemAvailable" {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0
		}
		return n * 1024
	}
	return 0
}

// Available is the memory dev can still allocate, in bytes, as well as it is
// known: its limit less what is in use; else a GPU's total memory less what
// is in use; else, for host memory without a limit, HostMemAvailable. 0
// means unknown.
func Available(dev Device) int64 {
	mem := dev.Memory()
	if mem.Limit > 0 {
		return max(mem.Limit-mem.InUse, 0)
	}
	if t, ok := dev.(interface{ TotalMemory() int64 }); ok && t.TotalMemory() > 0 {
		return max(t.TotalMemory()-mem.InUse, 0)
	}
	if dev.Kind() == KindCPU {
		return HostMemAvailable()
	}
	return 0
}
