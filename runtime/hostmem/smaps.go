package hostmem

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unsafe"
)

// MappingPages sums the Rss and AnonHugePages (KiB) of the mappings in an
// smaps listing (the format of /proc/PID/smaps) that overlap any of the
// address ranges [lo, hi). The kernel reports per mapping, so a mapping
// only partly inside the ranges counts whole.
func MappingPages(smaps io.Reader, ranges [][2]uintptr) (rssKiB, hugeKiB int64, err error) {
	sc := bufio.NewScanner(smaps)
	in := false
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(f[0], "-"); ok && !strings.HasSuffix(f[0], ":") {
			a, err1 := strconv.ParseUint(lo, 16, 64)
			b, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				in = false
				for _, r := range ranges {
					if uintptr(a) < r[1] && r[0] < uintptr(b) {
						in = true
					}
				}
				continue
			}
		}
		if !in || len(f) < 2 {
			continue
		}
		var dst *int64
		switch f[0] {
		case "Rss:":
			dst = &rssKiB
		case "AnonHugePages:":
			dst = &hugeKiB
		default:
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("smaps line %q: %w", line, err)
		}
		*dst += n
	}
	return rssKiB, hugeKiB, sc.Err()
}

// Ranges is the address ranges of blocks (empty ones left out).
func Ranges(blocks [][]byte) [][2]uintptr {
	var ranges [][2]uintptr
	for _, b := range blocks {
		if len(b) > 0 {
			p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
			ranges = append(ranges, [2]uintptr{p, p + uintptr(len(b))})
		}
	}
	return ranges
}

// Coverage is MappingPages of this process's mappings holding blocks: how
// much of them is resident and how much of that on transparent huge
// pages, in KiB. It fails where there is no /proc/self/smaps (not Linux).
func Coverage(blocks [][]byte) (rssKiB, hugeKiB int64, err error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	return MappingPages(f, Ranges(blocks))
}

// THPMode is the kernel's transparent huge page mode for anonymous memory
// ("always", "madvise" or "never", the bracketed word of
// /sys/kernel/mm/transparent_hugepage/enabled), or "" where unknown.
func THPMode() string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return ""
	}
	s := string(b)
	i, j := strings.IndexByte(s, '['), strings.IndexByte(s, ']')
	if i < 0 || j < i {
		return ""
	}
	return s[i+1 : j]
}
