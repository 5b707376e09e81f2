package cudabackend

import (
	"strings"
	"testing"
)

// TestCheckEnvSwitch: each switch takes its listed values and unset;
// anything else (a typo, a near miss, a value of another switch) is an
// error naming the variable, the value and the values it takes; the integer
// switches take non-negative integers only.
func TestCheckEnvSwitch(t *testing.T) {
	for name, values := range envSwitches {
		if values != nil && values[0] != "" {
			t.Errorf("%s: values %q do not start with \"\" (unset)", name, values)
		}
		for _, v := range values {
			if err := checkEnvSwitch(name, v); err != nil {
				t.Errorf("%s=%q: %v", name, v, err)
			}
		}
	}
	for _, c := range []struct{ name, value, names string }{
		{"FT_FLASH", "legacy2", `"legacy"`},
		{"FT_FLASH", "1", `"legacy"`},
		{"FT_FUSE_NORM", "on", `"0", "1"`},
		{"FT_NORM_TAIL", "true", `"0", "1"`},
		{"FT_VARLEN_CONTIG", "on", `"0", "1"`},
		{"FT_DECODE_PIPE", "2", `"0", "1"`},
		{"FT_FP8_GEMM_SCALES", "rescaled", `"rescale"`},
		{"FT_PREFILL_VARIANT", "wg9", `"wg6"`},
		{"FT_DECODE_CHUNK", "-1", "non-negative integer"},
		{"FT_DECODE_SPLIT", "32k", "non-negative integer"},
		{"FT_DECODE_SPLITS", "x", "non-negative integer"},
	} {
		err := checkEnvSwitch(c.name, c.value)
		if err == nil {
			t.Errorf("%s=%q: no error", c.name, c.value)
			continue
		}
		for _, part := range []string{c.name, `"` + c.value + `"`, c.names} {
			if !strings.Contains(err.Error(), part) {
				t.Errorf("%s=%q: error %q does not name %s", c.name, c.value, err, part)
			}
		}
	}
	for _, v := range []string{"", "0", "16", "256"} {
		if err := checkEnvSwitch("FT_DECODE_SPLITS", v); err != nil {
			t.Errorf("FT_DECODE_SPLITS=%q: %v", v, err)
		}
	}
	if err := checkEnvSwitch("FT_NOT_A_SWITCH", ""); err == nil {
		t.Error("an unlisted variable passed")
	}
}

// TestCheckEnvSwitches: the environment check reports every bad switch
// in one error and passes when all are unset or good.
func TestCheckEnvSwitches(t *testing.T) {
	for name := range envSwitches {
		t.Setenv(name, "")
	}
	t.Setenv("FT_FLASH", "legacy")
	t.Setenv("FT_DECODE_CHUNK", "64")
	if err := checkEnvSwitches(); err != nil {
		t.Fatalf("good switches: %v", err)
	}
	t.Setenv("FT_FUSE_NORM", "yes")
	t.Setenv("FT_DECODE_SPLITS", "-4")
	err := checkEnvSwitches()
	if err == nil || !strings.Contains(err.Error(), "FT_FUSE_NORM") || !strings.Contains(err.Error(), "FT_DECODE_SPLITS") {
		t.Fatalf("two bad switches: %v, want an error naming both", err)
	}
	m := EnvSwitchValues()
	m["FT_FLASH"][0] = "changed"
	if envSwitches["FT_FLASH"][0] != "" {
		t.Error("EnvSwitchValues shares its slices with the table")
	}
}
