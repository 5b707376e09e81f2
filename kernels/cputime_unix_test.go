//go:build unix

package kernels

import "syscall"

// processCPUSeconds is the user+system CPU time of this process so far, so
// benchmarks can report work per CPU-second, which shared machines disturb
// far less than wall time.
func processCPUSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
