package hostmem

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"unsafe"
)

// MappingPages sums the Rss and AnonHugePages (KiB) of the mappings in an
// smaps listing (the format of /proc/PID/smaps; ScanSmaps) that overlap
// any of the address ranges [lo, hi). The kernel reports per mapping, so a mapping
// only partly inside the ranges counts whole.
func MappingPages(smaps io.Reader, ranges [][2]uintptr) (rssKiB, hugeKiB int64, err error) {
	in := false
	err = ScanSmaps(smaps, func(lo, hi uintptr) {
		in = false
		for _, r := range ranges {
			if lo < r[1] && r[0] < hi {
				in = true
			}
		}
	}, func(field string, kib int64) {
		switch {
		case !in:
		case field == "Rss:":
			rssKiB += kib
		case field == "AnonHugePages:":
			hugeKiB += kib
		}
	})
	if err != nil {
		return 0, 0, err
	}
	return rssKiB, hugeKiB, nil
}

// BlockPages is the Rss and AnonHugePages (KiB) of the mappings holding
// some blocks (smaps), split by whether a mapping lies wholly within the
// blocks' ranges, each rounded out to HugePageSize and adjacent ones
// joined (a huge block's mapping runs on to the end of its last huge page,
// and the kernel merges adjacent mappings of like flags into one), or
// reaches beyond them (into memory that is not the blocks', so its pages
// cannot be attributed to the blocks and it counts whole under Out).
type BlockPages struct {
	InRssKiB, InHugeKiB   int64 // mappings wholly within the blocks' ranges
	OutRssKiB, OutHugeKiB int64 // mappings overlapping them and reaching beyond
}

// SplitPages is BlockPages from an smaps listing (the format of
// /proc/PID/smaps) for the address ranges [lo, hi).
func SplitPages(smaps io.Reader, ranges [][2]uintptr) (BlockPages, error) {
	const h = HugePageSize
	var spans [][2]uintptr // the ranges rounded out to huge pages, sorted, joined
	for _, r := range ranges {
		if r[1] > r[0] {
			spans = append(spans, [2]uintptr{r[0] &^ (h - 1), (r[1] + h - 1) &^ (h - 1)})
		}
	}
	slices.SortFunc(spans, func(a, b [2]uintptr) int { return cmp.Compare(a[0], b[0]) })
	var joined [][2]uintptr
	for _, r := range spans {
		if n := len(joined); n > 0 && r[0] <= joined[n-1][1] {
			joined[n-1][1] = max(joined[n-1][1], r[1])
			continue
		}
		joined = append(joined, r)
	}
	var p BlockPages
	var rss, huge *int64
	err := ScanSmaps(smaps, func(lo, hi uintptr) {
		rss, huge = nil, nil
		overlaps := false
		for _, r := range ranges {
			if lo < r[1] && r[0] < hi {
				overlaps = true
			}
		}
		if !overlaps {
			return
		}
		rss, huge = &p.OutRssKiB, &p.OutHugeKiB
		for _, r := range joined {
			if r[0] <= lo && hi <= r[1] {
				rss, huge = &p.InRssKiB, &p.InHugeKiB
			}
		}
	}, func(field string, kib int64) {
		switch {
		case rss == nil:
		case field == "Rss:":
			*rss += kib
		case field == "AnonHugePages:":
			*huge += kib
		}
	})
	return p, err
}

// ScanSmaps is the one parser of smaps listings here (MappingPages and
// SplitPages read through it). A listing (the format of /proc/PID/smaps,
// proc(5)) is, for each mapping, a header line "lo-hi perms offset dev
// inode [path]" with lo and hi in hexadecimal, then lines "Name: value"
// ("Rss:   4096 kB", "VmFlags: rd wr mr"). ScanSmaps calls mapping at each
// header with the range [lo, hi) and field at each Rss and AnonHugePages
// line with its name (colon included) and count in KiB; it skips every
// other line. A count that is not an integer is an error quoting the line,
// as is a read error of smaps.
func ScanSmaps(smaps io.Reader, mapping func(lo, hi uintptr), field func(name string, kib int64)) error {
	sc := bufio.NewScanner(smaps)
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
				mapping(uintptr(a), uintptr(b))
				continue
			}
		}
		if len(f) < 2 || (f[0] != "Rss:" && f[0] != "AnonHugePages:") {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return fmt.Errorf("smaps line %q: %w", line, err)
		}
		field(f[0], n)
	}
	return sc.Err()
}

// BlockCoverage is SplitPages of this process's mappings holding blocks.
// It reads all of /proc/self/smaps (~0.1 s in a process with many
// mappings, as a CUDA one) and fails where there is none (not Linux).
func BlockCoverage(blocks [][]byte) (BlockPages, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return BlockPages{}, err
	}
	defer f.Close()
	return SplitPages(f, Ranges(blocks))
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
