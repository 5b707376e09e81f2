package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestChunkMapSummary: the summary's figures from hand-checked rates.
// Chunk medians 100, 50, 200 (min 50, median 100, max 200, spread 4,
// between (200-50)/100 = 150%); within: (110-90)/100 = 0.2, 0, (220-180)/200
// = 0.2, median 20%; one chunk (50) below 90.
func TestChunkMapSummary(t *testing.T) {
	st := summarizeChunkMap([][]float64{{100, 110, 90}, {50, 50, 50}, {220, 180, 200}})
	want := chunkMapStats{Chunks: 3, Min: 50, Median: 100, Max: 200, Spread: 4, WithinChunk: 0.2, BetweenChunks: 1.5, Slow: 1}
	if st != want {
		t.Fatalf("summary %+v, want %+v", st, want)
	}
	// An even count of chunks and of passes: medians are the mean of the
	// middle two. Chunk medians 15, 30, 45, 60 → median 37.5; within:
	// 10/15, 20/30, 30/45, 40/60 all 2/3.
	st = summarizeChunkMap([][]float64{{10, 20}, {20, 40}, {30, 60}, {40, 80}})
	if st.Median != 37.5 || st.Min != 15 || st.Max != 60 || st.Spread != 4 || st.Slow != 2 ||
		st.WithinChunk < 0.6666 || st.WithinChunk > 0.6667 || st.BetweenChunks != 45/37.5 {
		t.Fatalf("even counts: %+v", st)
	}
	var b bytes.Buffer
	writeChunkMapSummary(&b, summarizeChunkMap([][]float64{{100, 110, 90}, {50, 50, 50}, {220, 180, 200}}))
	for _, line := range []string{
		"chunk medians over 3 chunks: min 50.0 / median 100.0 / max 200.0 GB/s, spread (max/min) 4.000; 1 chunk(s) below 90% of the median",
		"within a chunk (median over chunks of (max pass - min pass)/median): 20.0%; between chunks ((max - min)/median of the chunk medians): 150.0%",
	} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("summary lacks %q:\n%s", line, b.String())
		}
	}
}

// TestBenchHostChunkMap: a small chunk map (8 MiB in 1 MiB chunks, two
// passes, two allocations) prints one row per chunk with a rate for each
// pass and its median, each allocation's huge-page line and summary, and
// the allocations' medians.
func TestBenchHostChunkMap(t *testing.T) {
	code, out, errOut := run(t, "bench-host", "--chunk-map", "0.0078125", "--chunk-mib", "1", "--chunk-passes", "2", "--chunk-fresh", "2", "--threads", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "chunk map: 8 MiB mapped as the engine's pinned blocks") || !strings.Contains(out, "8 chunks of 1 MiB, 2 passes") {
		t.Errorf("header wrong:\n%s", out)
	}
	num := `[0-9]+\.[0-9]`
	rows := regexp.MustCompile(`(?m)^ +([0-9]+) +([0-9]+) +`+num+` +`+num+` +`+num+`  (-|[0-9.]+-[0-9.]+)$`).FindAllStringSubmatch(out, -1)
	if len(rows) != 16 {
		t.Fatalf("%d chunk rows, want 8 for each of 2 allocations:\n%s", len(rows), out)
	}
	for i, r := range rows {
		if r[1] != strconv.Itoa(i%8) || r[2] != strconv.Itoa(i%8) { // 1 MiB chunks: offset MiB = index
			t.Errorf("row %d: chunk %s at %s MiB, want %d at %d", i, r[1], r[2], i%8, i%8)
		}
	}
	for _, re := range []string{
		`allocation 0: mapped, touched and filled in ` + num,
		`allocation 1: mapped, touched and filled in ` + num,
		`chunk medians over 8 chunks: min ` + num,
		`within a chunk .*: ` + num + `+%; between chunks .*: ` + num + `+%`,
		`allocations' median GB/s: ` + num + `+ ` + num + `+; max/min ` + num,
		`(AnonHugePages [0-9]+ MiB of Rss [0-9]+ MiB|huge pages unknown)`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("output lacks %q:\n%s", re, out)
		}
	}
	if strings.Count(out, "chunk medians over") != 2 {
		t.Errorf("want one summary per allocation:\n%s", out)
	}
}

// TestBenchHostChunkMapArgs: bad sizes are usage errors naming the flag.
func TestBenchHostChunkMapArgs(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--chunk-map", "-1"}, "--chunk-map -1"},
		{[]string{"--chunk-map", "NaN"}, "--chunk-map NaN"},
		{[]string{"--chunk-map", "0.001", "--chunk-mib", "0"}, "--chunk-mib 0"},
		{[]string{"--chunk-map", "0.001", "--chunk-mib", "1", "--chunk-passes", "0"}, "--chunk-passes 0"},
		{[]string{"--chunk-map", "0.001", "--chunk-mib", "1", "--chunk-fresh", "0"}, "--chunk-fresh 0"},
		{[]string{"--chunk-map", "0.001", "--chunk-mib", "2"}, "less than one --chunk-mib 2 chunk"},
	} {
		code, _, errOut := run(t, append([]string{"bench-host"}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q: want exit 2 naming %q", c.args, code, errOut, c.want)
		}
	}
}

// TestPagemapFrame: pagemap entries decode to physical addresses only when
// present with a frame number shown, and the table's cell is in GiB.
func TestPagemapFrame(t *testing.T) {
	for _, c := range []struct {
		entry uint64
		phys  uint64
		ok    bool
	}{
		{pagemapPresent | 5, 5 * 4096, true},
		{pagemapPresent | 1<<55 | 0x40000, 1 << 30, true}, // bit 55 (soft-dirty) is not part of the frame
		{5, 0, false},              // not present
		{pagemapPresent, 0, false}, // present, frame hidden (no CAP_SYS_ADMIN)
	} {
		phys, ok := pagemapFrame(c.entry)
		if phys != c.phys || ok != c.ok {
			t.Errorf("entry %#x: %#x %v, want %#x %v", c.entry, phys, ok, c.phys, c.ok)
		}
	}
	// Samples 2 MiB apart: the last one at 1.5 GiB - 2 MiB covers up to 1.5 GiB.
	if got := physCell(1<<30, 3<<29-2<<20, 2<<20, true); got != "1.00-1.50" {
		t.Errorf("physCell: %q, want 1.00-1.50", got)
	}
	// The step shows: a last sample at 1 GiB + 4 MiB covers up to 1.0059 GiB
	// (1.00 had the top been taken as the sample's 4 KiB page).
	if got := physCell(1<<30, 1<<30+4<<20, 2<<20, true); got != "1.00-1.01" {
		t.Errorf("physCell, top sample's step: %q, want 1.00-1.01", got)
	}
	if got := physCell(1<<30, 3<<29-4096, 4096, true); got != "1.00-1.50" {
		t.Errorf("physCell, 4 KiB samples: %q, want 1.00-1.50", got)
	}
	if got := physCell(0, 0, 2<<20, false); got != "-" {
		t.Errorf("physCell unknown: %q, want -", got)
	}
}
