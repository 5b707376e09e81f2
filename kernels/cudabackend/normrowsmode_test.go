package cudabackend

import (
	"strings"
	"testing"
)

func TestParseNormRows(t *testing.T) {
	for s, want := range map[string]NormRowsMode{"": NormRowsAuto, "0": NormRowsOff, "1": NormRowsAll} {
		got, err := parseNormRows(s)
		if err != nil || got != want {
			t.Errorf("parseNormRows(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	if _, err := parseNormRows("yes"); err == nil || !strings.Contains(err.Error(), "FT_NORM_ROWS") {
		t.Errorf("parseNormRows(yes): %v, want an error naming FT_NORM_ROWS", err)
	}
}

// TestNormRowsShape: the many-rows kernels' launch shape reproduces
// norm.cu's block (ot) with a quarter of its threads, and declines the row
// lengths whose block is not a multiple of 128 or that need more than two
// chunks an old thread.
func TestNormRowsShape(t *testing.T) {
	for _, c := range []struct {
		dim, ot, threads, j int
		ok                  bool
	}{
		{4096, 1024, 256, 0, true}, {2048, 512, 128, 0, true}, {3072, 768, 192, 0, true},
		{8192, 1024, 256, 1, true}, {5120, 1024, 256, 1, true}, {512, 128, 32, 0, true},
		{4100, 1024, 256, 1, true}, {2560, 640, 160, 0, true},
		{64, 0, 0, 0, false}, {2304, 0, 0, 0, false}, {16384, 0, 0, 0, false}, {4098, 0, 0, 0, false},
	} {
		ot, threads, j, ok := normRowsShape(c.dim)
		if ok != c.ok || ok && (ot != c.ot || threads != c.threads || j != c.j) {
			t.Errorf("normRowsShape(%d) = %d, %d, %d, %v; want %d, %d, %d, %v", c.dim, ot, threads, j, ok, c.ot, c.threads, c.j, c.ok)
		}
	}
	if _, _, _, ok := normRows(NormRowsAuto, NormRowsMinRows-1, 4096); ok {
		t.Errorf("auto takes %d rows", NormRowsMinRows-1)
	}
	if _, _, _, ok := normRows(NormRowsAuto, NormRowsMinRows, 4096); !ok {
		t.Errorf("auto declines %d rows", NormRowsMinRows)
	}
	if _, _, _, ok := normRows(NormRowsAll, 2, 4096); !ok {
		t.Errorf("all declines 2 rows")
	}
	if _, _, _, ok := normRows(NormRowsAll, 1, 4096); ok {
		t.Errorf("all takes 1 row")
	}
	if _, _, _, ok := normRows(NormRowsOff, 4096, 4096); ok {
		t.Errorf("off takes a call")
	}
}
