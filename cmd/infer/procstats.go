package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// processStart is when the process began running Go code: the clock for
// "time to first token".
var processStart = time.Now()

// ioCounters reads /proc/self/io: rchar counts bytes the process read through
// read calls (page cache hits included), read_bytes what it made the kernel
// fetch from storage. Zero values when unavailable.
func ioCounters() (rchar, readBytes int64) {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "rchar":
			rchar = n
		case "read_bytes":
			readBytes = n
		}
	}
	return rchar, readBytes
}

// peakRSS is the process's largest resident set so far, in bytes.
func peakRSS() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Maxrss * 1024 // Linux reports KiB
}
