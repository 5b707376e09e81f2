package main

import (
	"bufio"
	"strings"
	"testing"
)

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
	rss, huge, err := mappingPages(bufio.NewScanner(strings.NewReader(smaps)), [][2]uintptr{{0x7f0000100000, 0x7f0000200000}, {0x7f0000800000, 0x7f0000800001}})
	if err != nil || rss != 8192 || huge != 6144 {
		t.Fatalf("rss %d, huge %d, %v: want 8192, 6144 (the first and third mappings)", rss, huge, err)
	}
	bad := "7f0000000000-7f0000400000 rw-p 00000000 00:00 0\nRss: x kB\n"
	if _, _, err := mappingPages(bufio.NewScanner(strings.NewReader(bad)), [][2]uintptr{{0x7f0000000000, 0x7f0000000001}}); err == nil {
		t.Fatal("a malformed Rss line gave no error")
	}
}
