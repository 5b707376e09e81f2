package cudabackend

import (
	"encoding/binary"
	"strings"
	"testing"
)

// TestWriteBlockTrace: records of two launches (one waited, one not, given
// out of order) give one line each, ordered by first start, with the
// median and last ends, the blocks seen of the grid's, the SMs, the name
// and the marks its blocks passed (median and latest; none for the other);
// then each kernel's share of the critical path.
func TestWriteBlockTrace(t *testing.T) {
	var raw []byte
	rec := func(id, sm, blk int, grid, start, wait, end, blocks uint64, marks [4]uint32) {
		for _, w := range []uint64{uint64(id) | uint64(sm)<<16 | uint64(blk)<<32, grid, start, wait, end, blocks,
			uint64(marks[0]) | uint64(marks[1])<<32, uint64(marks[2]) | uint64(marks[3])<<32} {
			raw = binary.LittleEndian.AppendUint64(raw, w)
		}
	}
	const t0 = 1_000_000
	rec(1, 3, 0, 77, t0+5000, 0, t0+9000, 2, [4]uint32{})                    // the second launch: no wait, no marks
	rec(0, 0, 0, 42, t0, t0+1000, t0+4000, 3, [4]uint32{0, 1500})            // the first; mark 1 at 1.5 µs
	rec(0, 1, 1, 42, t0+500, t0+2000, t0+6000, 3, [4]uint32{0, 2000, 0, 10}) // mark 1 at 2.5, mark 3 at 0.51
	rec(0, 1, 2, 42, t0+600, t0+3000, t0+5000, 3, [4]uint32{0, 3400})        // mark 1 at 4.0
	var sb strings.Builder
	if err := writeBlockTrace(&sb, "step", []string{"gemv_a", "attn_b"}, raw, 5); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(sb.String()), "\n")
	if len(lines) != 6 {
		t.Fatalf("got %d lines:\n%s", len(lines), sb.String())
	}
	// the critical path: gemv_a to its last end (6 µs), attn_b from there to 9
	for i, w := range [][]string{{"#", "1", "6.00", "6.00", "gemv_a"}, {"#", "1", "3.00", "3.00", "attn_b"}} {
		if got := strings.Fields(lines[4+i]); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("critical line %d: %q, want %q", i, got, w)
		}
	}
	if !strings.HasPrefix(lines[0], "# step: 2 launches, 4 block records (5 lost)") {
		t.Errorf("header %q", lines[0])
	}
	want := [][]string{
		{"0.00", "1.00", "2.00", "5.00", "6.00", "3/3", "2", "gemv_a", "m1", "2.50/4.00", "m3", "0.51/0.51"},
		{"5.00", "-1.00", "-1.00", "9.00", "9.00", "1/2", "1", "attn_b"},
	}
	for i, w := range want {
		if got := strings.Fields(lines[i+1]); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("line %d: %q, want %q", i+1, got, w)
		}
	}
	sb.Reset()
	if err := writeBlockTrace(&sb, "unknown", nil, raw[:blockTraceBytes], 0); err != nil || !strings.Contains(sb.String(), "kernel#1") {
		t.Errorf("a kernel index past the names: %v %q", err, sb.String())
	}
}
