package hostmem

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// smapsExcerpt is a real-looking excerpt of /proc/PID/smaps (Linux 6.x
// field set): a file mapping of the binary, the heap, a 2 MiB-aligned
// anonymous block of 8 MiB with 6 MiB on huge pages (as Map makes), the
// anonymous mapping right after it, a shared library whose path holds
// dashes, the stack and vsyscall.
const smapsExcerpt = `00400000-00c5c000 r-xp 00000000 103:02 2359340                           /usr/local/bin/infer
Size:               8560 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
Rss:                6412 kB
Pss:                6412 kB
Pss_Dirty:             0 kB
Shared_Clean:          0 kB
Shared_Dirty:          0 kB
Private_Clean:      6412 kB
Private_Dirty:         0 kB
Referenced:         6412 kB
Anonymous:             0 kB
KSM:                   0 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
Swap:                  0 kB
SwapPss:               0 kB
Locked:                0 kB
THPeligible:           0
VmFlags: rd ex mr mw me dw sd
01a2b000-01a4c000 rw-p 00000000 00:00 0                                  [heap]
Size:                132 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
Rss:                  12 kB
Pss:                  12 kB
Anonymous:            12 kB
AnonHugePages:         0 kB
THPeligible:           1
VmFlags: rd wr mr mw me ac sd
7f3a40000000-7f3a40800000 rw-p 00000000 00:00 0 
Size:               8192 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
Rss:                8192 kB
Pss:                8192 kB
Private_Dirty:      8192 kB
Anonymous:          8192 kB
AnonHugePages:      6144 kB
ShmemPmdMapped:        0 kB
THPeligible:           1
VmFlags: rd wr mr mw me ac sd hg
7f3a40800000-7f3a40a00000 rw-p 00000000 00:00 0 
Size:               2048 kB
Rss:                 512 kB
Anonymous:           512 kB
AnonHugePages:         0 kB
THPeligible:           1
VmFlags: rd wr mr mw me ac sd
7f3a52a00000-7f3a52a28000 r--p 00000000 103:02 1835262                   /usr/lib/x86_64-linux-gnu/libc.so.6
Size:                160 kB
Rss:                 160 kB
AnonHugePages:         0 kB
THPeligible:           0
VmFlags: rd mr mw me sd
7ffd1c3e5000-7ffd1c406000 rw-p 00000000 00:00 0                          [stack]
Size:                132 kB
Rss:                  40 kB
AnonHugePages:         0 kB
VmFlags: rd wr mr mw me gd ac
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
Size:                  4 kB
Rss:                   0 kB
AnonHugePages:         0 kB
VmFlags: ex
`

// TestScanSmaps: on the excerpt the parser reports each mapping's range
// (file, anonymous, special; paths with dashes are not ranges) and, within
// it, exactly its Rss and AnonHugePages counts, skipping every other field
// (Pss, Anonymous, THPeligible, VmFlags, …); a count that is not a number
// is an error quoting the line.
func TestScanSmaps(t *testing.T) {
	var got []string
	err := ScanSmaps(strings.NewReader(smapsExcerpt), func(lo, hi uintptr) {
		got = append(got, fmt.Sprintf("%x-%x", lo, hi))
	}, func(name string, kib int64) {
		got = append(got, fmt.Sprintf("%s%d", name, kib))
	})
	want := []string{
		"400000-c5c000", "Rss:6412", "AnonHugePages:0",
		"1a2b000-1a4c000", "Rss:12", "AnonHugePages:0",
		"7f3a40000000-7f3a40800000", "Rss:8192", "AnonHugePages:6144",
		"7f3a40800000-7f3a40a00000", "Rss:512", "AnonHugePages:0",
		"7f3a52a00000-7f3a52a28000", "Rss:160", "AnonHugePages:0",
		"7ffd1c3e5000-7ffd1c406000", "Rss:40", "AnonHugePages:0",
		"ffffffffff600000-ffffffffff601000", "Rss:0", "AnonHugePages:0",
	}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("%v, %q\nwant %q", err, got, want)
	}
	bad := strings.Replace(smapsExcerpt, "AnonHugePages:      6144 kB", "AnonHugePages:      6x44 kB", 1)
	err = ScanSmaps(strings.NewReader(bad), func(uintptr, uintptr) {}, func(string, int64) {})
	if err == nil || !strings.Contains(err.Error(), "6x44") {
		t.Fatalf("a malformed AnonHugePages count: %v, want an error quoting its line", err)
	}
}

// TestSmapsExcerptPages: MappingPages and SplitPages read the excerpt
// through ScanSmaps. A block in the huge mapping counts that mapping whole
// (Rss 8 MiB, 6 MiB huge); a block that also reaches the next mapping adds
// its Rss; SplitPages puts the huge mapping under In for the first (it
// lies within the block rounded out to huge pages) and both under Out for
// a small block in the middle of the huge mapping.
func TestSmapsExcerptPages(t *testing.T) {
	block := [][2]uintptr{{0x7f3a40000000, 0x7f3a40800000}}
	rss, huge, err := MappingPages(strings.NewReader(smapsExcerpt), block)
	if err != nil || rss != 8192 || huge != 6144 {
		t.Fatalf("one block: rss %d, huge %d, %v; want 8192, 6144", rss, huge, err)
	}
	rss, huge, err = MappingPages(strings.NewReader(smapsExcerpt), [][2]uintptr{{0x7f3a40000000, 0x7f3a40800001}})
	if err != nil || rss != 8192+512 || huge != 6144 {
		t.Fatalf("a block one byte into the next mapping: rss %d, huge %d, %v; want 8704, 6144", rss, huge, err)
	}
	p, err := SplitPages(strings.NewReader(smapsExcerpt), block)
	if want := (BlockPages{InRssKiB: 8192, InHugeKiB: 6144}); err != nil || p != want {
		t.Fatalf("one block: %+v, %v; want %+v", p, err, want)
	}
	p, err = SplitPages(strings.NewReader(smapsExcerpt), [][2]uintptr{{0x7f3a40200000, 0x7f3a40400000}})
	if want := (BlockPages{OutRssKiB: 8192, OutHugeKiB: 6144}); err != nil || p != want {
		t.Fatalf("a block inside a longer mapping: %+v, %v; want %+v", p, err, want)
	}
}
