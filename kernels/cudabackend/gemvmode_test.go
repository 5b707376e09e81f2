package cudabackend

import (
	"strings"
	"testing"
)

// TestParseGEMV: FT_GEMV's values set what they did before the one parser:
// unset or empty the pipelined GEMVs with q/k/v apart as gemvMixedDefault
// says; mixed q/k/v on gemv.cu's kernel with the rest pipelined; pipe the
// pipelined GEMVs everywhere; persist gemv.cu's kernels; rowblocks the
// row-block kernels; bal2/bal4/bal the split-K twins with the pipelined
// GEMVs under them. Every value GEMVValues lists parses.
func TestParseGEMV(t *testing.T) {
	want := map[string]gemvMode{
		"":          {Pipe: "pipe", PersistQKV: gemvMixedDefault},
		"mixed":     {Pipe: "pipe", PersistQKV: true},
		"pipe":      {Pipe: "pipe"},
		"persist":   {},
		"rowblocks": {RowBlocks: true},
		"bal":       {Pipe: "pipe", Bal: gemvBalAuto},
		"bal2":      {Pipe: "pipe", Bal: 2},
		"bal4":      {Pipe: "pipe", Bal: 4},
	}
	for v, w := range want {
		got, err := parseGEMV(v)
		if err != nil || got != w {
			t.Errorf("FT_GEMV=%q: %+v, %v; want %+v", v, got, err, w)
		}
	}
	values := GEMVValues()
	if len(values) != len(want) || values[0] != "" {
		t.Errorf("GEMVValues() = %q: want the %d values parseGEMV takes, \"\" first", values, len(want))
	}
	for _, v := range values {
		if _, ok := want[v]; !ok {
			t.Errorf("GEMVValues() lists %q, which this test does not know", v)
		}
	}
	t.Setenv("FT_GEMV", "bal4")
	if got, err := gemvFromEnv(); err != nil || got != want["bal4"] {
		t.Errorf("gemvFromEnv with FT_GEMV=bal4: %+v, %v", got, err)
	}
}

// TestParseGEMVRejects: values the kernels do not come in (bal3, bal8),
// near misses (Mixed, "mixed ", pipe4, bal02, bal+2) and junk are errors
// that name the variable, the value and the values it takes, never a silent
// fall-back to some kernel.
func TestParseGEMVRejects(t *testing.T) {
	for _, v := range []string{"bal3", "bal8", "bal0", "bal02", "bal+2", "balx", "Mixed", "mixed ", "pipe4", "persistent", "1", "0"} {
		_, err := parseGEMV(v)
		if err == nil {
			t.Errorf("FT_GEMV=%q: no error", v)
			continue
		}
		msg := err.Error()
		for _, part := range []string{"FT_GEMV", `"` + v + `"`, `"mixed"`, `"persist"`, `"bal4"`} {
			if !strings.Contains(msg, part) {
				t.Errorf("FT_GEMV=%q: error %q does not name %s", v, msg, part)
			}
		}
	}
	t.Setenv("FT_GEMV", "bal3")
	if _, err := gemvFromEnv(); err == nil {
		t.Error("gemvFromEnv with FT_GEMV=bal3: no error")
	}
}
