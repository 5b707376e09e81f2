package host

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

// dramReadBytes is the buffer HostReadBandwidth reads: several times a
// server's last-level cache.
const dramReadBytes = 512 << 20

// dramCache holds HostReadBandwidth's measurements per thread count: the
// figure is the machine's, taken once a process.
var dramCache struct {
	sync.Mutex
	byThreads map[int]float64
}

// HostReadBandwidth is the host's DRAM read bandwidth in bytes a second on
// the backend's threads (offload.HostReadMeasurer): the STREAM-like read
// (ReadSum, the kernel `infer bench-host` reports) over 512 MiB, best of 3,
// measured once a process per thread count, when FT_HOST_DRAM_GBPS is
// "measure"; FT_HOST_DRAM_GBPS=N sets it instead (GB/s). Unset or 0, it is
// 0: the offload planner's shared-read model stays off. Off by default:
// on the H200 machine (2026-12-01, bench/RESULTS.md, s7d) the model's
// plans measured no better than the plain model's (budget 0 + host 116.0 ms
// against 104.5), because host units run slower inside the forward even
// with no copy beside them (4.44 ms against 3.2 alone), which the model's
// alone-rate input does not see.
func (b *Backend) HostReadBandwidth() (float64, error) {
	v := os.Getenv("FT_HOST_DRAM_GBPS")
	if v == "" {
		return 0, nil
	}
	if v != "measure" {
		g, err := strconv.ParseFloat(v, 64)
		if err != nil || !(g >= 0) || g > 1e6 { // NaN and ±Inf too
			return 0, fmt.Errorf("FT_HOST_DRAM_GBPS=%q: want \"measure\" or GB/s, a number from 0 (off) up", v)
		}
		return g * 1e9, nil
	}
	th := b.e.Threads()
	dramCache.Lock()
	defer dramCache.Unlock()
	if bw, ok := dramCache.byThreads[th]; ok {
		return bw, nil
	}
	buf, release, err := dramBuffer(dramReadBytes)
	if err != nil {
		return 0, fmt.Errorf("host: read-bandwidth buffer of %d bytes: %w", dramReadBytes, err)
	}
	defer release()
	for i := 0; i < len(buf); i += 1024 { // one write a page: real pages, not the zero page
		buf[i] = float32(i & 1023)
	}
	b.e.ReadSum(buf)
	best := time.Duration(1 << 62)
	for range 3 {
		t0 := time.Now()
		b.e.ReadSum(buf)
		best = min(best, time.Since(t0))
	}
	bw := float64(len(buf)*4) / max(best.Seconds(), 1e-9)
	if dramCache.byThreads == nil {
		dramCache.byThreads = map[int]float64{}
	}
	dramCache.byThreads[th] = bw
	return bw, nil
}
