package cudabackend

import (
	"strings"
	"testing"
)

// TestParseFP8Add: FT_FP8_ADD unset or "1" keeps the adding FP8 GEMV on,
// "0" turns it off, anything else is an error naming the variable.
func TestParseFP8Add(t *testing.T) {
	for _, c := range []struct {
		in  string
		off bool
	}{{"", false}, {"1", false}, {"0", true}} {
		off, err := parseFP8Add(c.in)
		if err != nil || off != c.off {
			t.Errorf("parseFP8Add(%q) = %v, %v; want %v, nil", c.in, off, err, c.off)
		}
	}
	for _, bad := range []string{"yes", "2", " 0"} {
		if _, err := parseFP8Add(bad); err == nil || !strings.Contains(err.Error(), "FT_FP8_ADD") {
			t.Errorf("parseFP8Add(%q): error %v, want one naming FT_FP8_ADD", bad, err)
		}
	}
}
