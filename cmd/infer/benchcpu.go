package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuSample is what the host did up to a moment, for the trace line of a
// bench's timed forwards (FT_TRACE=1): the machine's CPU time from
// /proc/stat (steal: time the hypervisor gave this VM's vCPUs to someone
// else), the process's context switches, the Go GC's cycles and pauses.
type cpuSample struct {
	at            time.Time
	total, steal  uint64 // jiffies, all CPUs; 0 when /proc/stat is not there
	nvcsw, nivcsw int64  // voluntary and involuntary context switches
	numGC         uint32
	pauseNs       uint64
}

func sampleCPU() cpuSample {
	s := cpuSample{at: time.Now()}
	if f, err := os.Open("/proc/stat"); err == nil {
		s.total, s.steal = parseProcStat(f)
		f.Close()
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.nvcsw, s.nivcsw = int64(ru.Nvcsw), int64(ru.Nivcsw)
	}
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	s.numGC, s.pauseNs = ms.NumGC, ms.PauseTotalNs
	return s
}

// parseProcStat reads the aggregate "cpu" line of /proc/stat: the sum of
// its time fields (guest time is already in user) and the steal field (the
// eighth); zeros when the line is missing or short.
func parseProcStat(r io.Reader) (total, steal uint64) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 9 || f[0] != "cpu" {
			continue
		}
		for i, v := range f[1:min(len(f), 9)] {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return 0, 0
			}
			total += n
			if i == 7 {
				steal = n
			}
		}
		return total, steal
	}
	return 0, 0
}

// timedLine describes the timed forwards between a and b: each forward's
// ms, the GC cycles and their pause time, the CPU steal share and the
// process's context switches.
func timedLine(a, b cpuSample, ms []float64) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "timed forwards %d:", len(ms))
	for _, v := range ms {
		fmt.Fprintf(&sb, " %.1f", v)
	}
	fmt.Fprintf(&sb, " ms; GC cycles %d (pauses %.2f ms)", b.numGC-a.numGC, float64(b.pauseNs-a.pauseNs)/1e6)
	if dt := b.total - a.total; b.total > a.total {
		fmt.Fprintf(&sb, "; CPU steal %.2f%% of all CPUs' time", 100*float64(b.steal-a.steal)/float64(dt))
	} else {
		sb.WriteString("; CPU steal unknown (no /proc/stat)")
	}
	fmt.Fprintf(&sb, "; context switches %d voluntary, %d involuntary", b.nvcsw-a.nvcsw, b.nivcsw-a.nivcsw)
	return sb.String()
}

// traceTimed prints timedLine to stderr under FT_TRACE=1.
func traceTimed(a cpuSample, ms []float64) {
	if os.Getenv("FT_TRACE") == "1" && !a.at.IsZero() {
		fmt.Fprintf(os.Stderr, "trace: %s\n", timedLine(a, sampleCPU(), ms))
	}
}
