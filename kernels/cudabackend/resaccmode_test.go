package cudabackend

import (
	"strings"
	"testing"
)

func TestParseResAcc(t *testing.T) {
	for s, want := range map[string]bool{"": false, "0": false, "1": true} {
		if got, err := parseResAcc(s); err != nil || got != want {
			t.Errorf("parseResAcc(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	if _, err := parseResAcc("on"); err == nil || !strings.Contains(err.Error(), "FT_PREFILL_RESACC") {
		t.Errorf("parseResAcc(on): %v, want an error naming FT_PREFILL_RESACC", err)
	}
}
