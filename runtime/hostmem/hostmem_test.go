package hostmem

import (
	goruntime "runtime"
	"strings"
	"testing"
	"unsafe"
)

// TestMapHuge: a huge block starts on a 2 MiB boundary, is exactly as long
// as asked over a mapping of whole huge pages, reads back zero, holds what
// is written (to its last byte), and frees once (a second Free is the
// first's result).
func TestMapHuge(t *testing.T) {
	for _, n := range []int64{1, 4096, HugePageSize, 3*HugePageSize + 12345} {
		b, err := Map(n, Options{Huge: true, Touchers: 3})
		if err != nil {
			t.Fatal(err)
		}
		d := b.Bytes()
		if int64(len(d)) != n {
			t.Fatalf("%d bytes: got %d", n, len(d))
		}
		if goruntime.GOOS == "linux" {
			p := uintptr(unsafe.Pointer(&d[0]))
			if !b.Aligned || p%HugePageSize != 0 {
				t.Fatalf("%d bytes: block at %#x (Aligned %v), want a 2 MiB boundary", n, p, b.Aligned)
			}
			if m := b.MappedLen(); m%HugePageSize != 0 || m < n || m >= n+HugePageSize {
				t.Fatalf("%d bytes: mapping of %d, want whole huge pages just covering it", n, m)
			}
		}
		for i := int64(0); i < n; i += 777 {
			if d[i] != 0 {
				t.Fatalf("byte %d of a fresh block is %d", i, d[i])
			}
		}
		d[n-1], d[0] = 2, 1
		if d[0] != 1 || (n > 1 && d[n-1] != 2) {
			t.Fatal("the block does not hold what was written")
		}
		if b.CollapseErr != nil {
			t.Errorf("%d bytes: %v", n, b.CollapseErr)
		}
		if err := b.Free(); err != nil {
			t.Fatal(err)
		}
		if err := b.Free(); err != nil || b.Bytes() != nil {
			t.Fatalf("second Free: %v, bytes %d", err, len(b.Bytes()))
		}
	}
}

// TestMapPlain: without Huge the block is a plain mapping of whole pages.
func TestMapPlain(t *testing.T) {
	b, err := Map(10000, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if len(b.Bytes()) != 10000 {
		t.Fatalf("got %d bytes", len(b.Bytes()))
	}
	if goruntime.GOOS == "linux" && b.MappedLen() != 12288 {
		t.Fatalf("mapping of %d bytes, want 3 pages", b.MappedLen())
	}
	b.Bytes()[9999] = 7
}

// TestMapBadSize: a non-positive size is an error naming it.
func TestMapBadSize(t *testing.T) {
	for _, n := range []int64{0, -5} {
		if _, err := Map(n, Options{Huge: true}); err == nil || !strings.Contains(err.Error(), "positive") {
			t.Fatalf("Map(%d): %v", n, err)
		}
	}
}

// TestHugeCoverage: where the kernel's THP mode is not "never", a huge
// block of 8 huge pages is (nearly) all on huge pages by smaps after Map
// (the fault path with MADV_HUGEPAGE, and MADV_COLLAPSE for what it
// missed); the test allows one page short for a kernel short of free huge
// pages at the moment, and skips where THP is off or unknown.
func TestHugeCoverage(t *testing.T) {
	switch mode := THPMode(); mode {
	case "always", "madvise":
	default:
		t.Skipf("transparent huge pages %q (not always/madvise): nothing to measure", mode)
	}
	const n = 8 * HugePageSize
	b, err := Map(n, Options{Huge: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if b.CollapseErr != nil {
		t.Logf("collapse: %v", b.CollapseErr)
	}
	rss, huge, err := Coverage([][]byte{b.Bytes()})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("THP %s: AnonHugePages %d KiB of Rss %d KiB", THPMode(), huge, rss)
	if rss < n>>10 {
		t.Fatalf("Rss %d KiB of a touched block of %d KiB", rss, n>>10)
	}
	if huge < (n-HugePageSize)>>10 {
		t.Fatalf("AnonHugePages %d KiB of %d KiB: the block is not on huge pages", huge, n>>10)
	}
}

// TestMappingPages: only the mappings overlapping the ranges count, their
// Rss and AnonHugePages summed; a malformed count is an error.
func TestMappingPages(t *testing.T) {
	const smaps = `7f0000000000-7f0000400000 rw-p 00000000 00:00 0
Size:               4096 kB
Rss:                4096 kB
AnonHugePages:      2048 kB
7f0000400000-7f0000800000 rw-p 00000000 00:00 0
Rss:                1024 kB
AnonHugePages:         0 kB
7f0000800000-7f0000c00000 rw-p 00000000 00:00 0
Rss:                4096 kB
AnonHugePages:      4096 kB
VmFlags: rd wr mr mw me ac sd hg
`
	rss, huge, err := MappingPages(strings.NewReader(smaps), [][2]uintptr{{0x7f0000100000, 0x7f0000200000}, {0x7f0000800000, 0x7f0000800001}})
	if err != nil || rss != 8192 || huge != 6144 {
		t.Fatalf("rss %d, huge %d, %v: want 8192, 6144 (the first and third mappings)", rss, huge, err)
	}
	bad := "7f0000000000-7f0000400000 rw-p 00000000 00:00 0\nRss: x kB\n"
	if _, _, err := MappingPages(strings.NewReader(bad), [][2]uintptr{{0x7f0000000000, 0x7f0000000001}}); err == nil {
		t.Fatal("a malformed Rss line gave no error")
	}
}

// TestSplitPages: a mapping wholly within the blocks' ranges (rounded out
// to huge pages: a block's mapping runs to the end of its last huge page;
// two adjacent blocks in one merged mapping) counts under In, one that
// holds a block and reaches beyond it (a merge with other memory) counts
// whole under Out, one holding no block not at all; a malformed count is
// an error.
func TestSplitPages(t *testing.T) {
	const smaps = `7f0000000000-7f0000400000 rw-p 00000000 00:00 0
Rss:                4096 kB
AnonHugePages:      4096 kB
7f0000400000-7f0000c00000 rw-p 00000000 00:00 0
Rss:                8192 kB
AnonHugePages:      6144 kB
7f0001000000-7f0001400000 rw-p 00000000 00:00 0
Rss:                4096 kB
AnonHugePages:      2048 kB
7f0002000000-7f0002200000 rw-p 00000000 00:00 0
Rss:                2048 kB
AnonHugePages:      2048 kB
`
	ranges := [][2]uintptr{
		{0x7f0000000000, 0x7f0000300001}, // its mapping: to the end of the huge page
		{0x7f0000400000, 0x7f0000600000}, // in a mapping 6 MiB longer
		{0x7f0001200000, 0x7f0001400000}, // two adjacent blocks, one mapping
		{0x7f0001000000, 0x7f0001200000},
	}
	p, err := SplitPages(strings.NewReader(smaps), ranges)
	want := BlockPages{InRssKiB: 8192, InHugeKiB: 6144, OutRssKiB: 8192, OutHugeKiB: 6144}
	if err != nil || p != want {
		t.Fatalf("%+v, %v: want %+v", p, err, want)
	}
	bad := "7f0000000000-7f0000400000 rw-p 00000000 00:00 0\nAnonHugePages: x kB\n"
	if _, err := SplitPages(strings.NewReader(bad), ranges); err == nil {
		t.Fatal("a malformed AnonHugePages line gave no error")
	}
}

// TestTouch: Touch zeroes the first byte of each 4 KiB page, on one or
// several goroutines, and leaves every other byte alone.
func TestTouch(t *testing.T) {
	for _, workers := range []int{1, 3, 0} {
		d := make([]byte, 2*touchPiece+5*4096+77)
		for i := range d {
			d[i] = 0xAB
		}
		Touch(d, workers)
		for i, v := range d {
			if want := byte(0xAB); i%4096 == 0 && v != 0 || i%4096 != 0 && v != want {
				t.Fatalf("workers %d: byte %d is %#x after Touch", workers, i, v)
			}
		}
	}
}
