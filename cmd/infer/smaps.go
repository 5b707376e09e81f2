package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"
)

// mappingPages sums the Rss and AnonHugePages (kB) of the mappings in an
// smaps listing (/proc/PID/smaps) that overlap any of the address ranges
// [lo, hi).
func mappingPages(smaps *bufio.Scanner, ranges [][2]uintptr) (rssKiB, hugeKiB int64, err error) {
	in := false
	for smaps.Scan() {
		line := smaps.Text()
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
	return rssKiB, hugeKiB, smaps.Err()
}

// hugePagesLine says how much of the mappings holding blocks the kernel
// backs with transparent huge pages (this process's smaps; "huge pages
// unknown" where there is none, as off Linux).
func hugePagesLine(blocks [][]byte) string {
	var ranges [][2]uintptr
	for _, b := range blocks {
		if len(b) > 0 {
			p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
			ranges = append(ranges, [2]uintptr{p, p + uintptr(len(b))})
		}
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return "huge pages unknown (" + err.Error() + ")"
	}
	defer f.Close()
	rss, huge, err := mappingPages(bufio.NewScanner(f), ranges)
	if err != nil {
		return "huge pages unknown (" + err.Error() + ")"
	}
	return fmt.Sprintf("their mappings: AnonHugePages %d MiB of Rss %d MiB", huge>>10, rss>>10)
}
