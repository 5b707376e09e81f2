package cudabackend

import (
	"slices"
	"strings"
	"testing"
)

// TestFP8VariantFromEnv: unset or empty picks "auto", "auto" and every
// compiled variant are accepted, anything else is an error naming the
// variable.
func TestFP8VariantFromEnv(t *testing.T) {
	t.Setenv("FT_FP8_VARIANT", "")
	if v, err := fp8VariantFromEnv(); err != nil || v != fp8AutoVariant {
		t.Fatalf("empty: %q, %v; want %q", v, err, fp8AutoVariant)
	}
	names := FP8VariantNames()
	if len(names) != len(fp8Variants)+1 || names[0] != fp8AutoVariant {
		t.Fatalf("FP8VariantNames %v: want %q first, then the %d variants", names, fp8AutoVariant, len(fp8Variants))
	}
	for _, v := range append([]string{fp8AutoVariant}, names[1:]...) {
		t.Setenv("FT_FP8_VARIANT", v)
		if got, err := fp8VariantFromEnv(); err != nil || got != v {
			t.Errorf("%s: %q, %v", v, got, err)
		}
	}
	for _, v := range fp8Variants {
		if !slices.Contains(names, v.Name) {
			t.Errorf("FP8VariantNames lacks %q", v.Name)
		}
	}
	for _, bad := range []string{"u32r1s", "Auto", "u8r1s "} {
		t.Setenv("FT_FP8_VARIANT", bad)
		if _, err := fp8VariantFromEnv(); err == nil || !strings.Contains(err.Error(), "FT_FP8_VARIANT") || !strings.Contains(err.Error(), "auto") {
			t.Errorf("FT_FP8_VARIANT=%q: err %v, want one naming FT_FP8_VARIANT and the values", bad, err)
		}
	}
}

// TestFP8AutoPick: "auto" runs the measured best per kind (the
// tensor-core mm4 for gemv_fp8_v, mm2 for q/k/v and gate·up), the scalar
// fallback its own best (q/k/v u4r2s, gate·up u4r1s, gemv_fp8_v p4s from
// K = 8,192 and u8r1g below), every pick is a compiled variant, a
// variant's name forces it for every kind and width, and a name that is
// not compiled runs u8r1s.
func TestFP8AutoPick(t *testing.T) {
	compiled := func(name string) bool {
		return slices.ContainsFunc(fp8Variants, func(v fp8Variant) bool { return v.Name == name })
	}
	mma := func(name string) bool {
		return slices.ContainsFunc(fp8Variants, func(v fp8Variant) bool { return v.Name == name && v.MMA })
	}
	if !compiled(fp8FixedDefault) {
		t.Fatalf("fp8FixedDefault %q is not compiled", fp8FixedDefault)
	}
	for _, c := range []struct {
		kind         fp8Kind
		K            int
		want, scalar string
	}{
		{fp8KindQKV, 4096, "mm2", "u4r2s"}, {fp8KindQKV, 16384, "mm2", "u4r2s"}, {fp8KindQKV, 16, "mm2", "u4r2s"},
		{fp8KindGateUp, 4096, "mm2", "u4r1s"}, {fp8KindGateUp, 8192, "mm2", "u4r1s"},
		{fp8KindGEMV, 4096, "mm4", "u8r1g"}, {fp8KindGEMV, 8191, "mm4", "u8r1g"}, {fp8KindGEMV, 16, "mm4", "u8r1g"},
		{fp8KindGEMV, 8192, "mm4", "p4s"}, {fp8KindGEMV, 14336, "mm4", "p4s"},
	} {
		for _, name := range []string{fp8AutoVariant, ""} {
			got := fp8VariantFor(name, c.kind, c.K)
			if got != c.want {
				t.Errorf("%q, kind %d, K %d: %q, want %q", name, c.kind, c.K, got, c.want)
			}
			if !compiled(got) {
				t.Errorf("%q, kind %d, K %d: %q is not compiled (fp8Variants)", name, c.kind, c.K, got)
			}
		}
		if got := fp8ScalarPick(c.kind, c.K); got != c.scalar || !compiled(got) || mma(got) {
			t.Errorf("scalar pick, kind %d, K %d: %q, want %q (compiled, scalar)", c.kind, c.K, got, c.scalar)
		}
		for _, v := range fp8Variants {
			if got := fp8VariantFor(v.Name, c.kind, c.K); got != v.Name {
				t.Errorf("%q, kind %d, K %d: %q, want the variant forced", v.Name, c.kind, c.K, got)
			}
		}
		if got := fp8VariantFor("u32r1s", c.kind, c.K); got != fp8FixedDefault {
			t.Errorf("uncompiled name, kind %d, K %d: %q, want %q", c.kind, c.K, got, fp8FixedDefault)
		}
	}
}

// TestFP8MMATakes: the tensor-core variants take per-channel scales and
// blocks of 64 or more from compute capability 8.0, nothing else.
func TestFP8MMATakes(t *testing.T) {
	for _, c := range []struct {
		block, cc int
		want      bool
	}{
		{0, 90, true}, {64, 90, true}, {128, 89, true}, {256, 80, true},
		{16, 90, false}, {32, 90, false}, {0, 75, false}, {128, 70, false},
	} {
		if got := fp8MMATakes(c.block, c.cc); got != c.want {
			t.Errorf("block %d, cc %d: %v, want %v", c.block, c.cc, got, c.want)
		}
	}
}

// TestFP8Persist: every persistent variant is a compiled tensor-core
// variant whose fallback is one too and whose twin maps to it; the widths
// each takes; which kinds FT_FP8_PERSIST's values turn persistent.
func TestFP8Persist(t *testing.T) {
	isMMA := func(name string) bool {
		return slices.ContainsFunc(fp8Variants, func(v fp8Variant) bool { return v.Name == name && v.MMA })
	}
	for name, p := range fp8PersistNB {
		if !isMMA(name) || !isMMA(p.Fallback) || fp8PersistTwin(p.Fallback) != name {
			t.Errorf("%s: fallback %s, twin of the fallback %s", name, p.Fallback, fp8PersistTwin(p.Fallback))
		}
	}
	if twin := fp8PersistTwin("u8r1s"); twin != "" {
		t.Errorf("a scalar variant has the persistent twin %q", twin)
	}
	for _, c := range []struct {
		nb, K int
		want  bool
	}{{2, 4096, true}, {4, 4096, true}, {2, 14336, true}, {4, 14336, false}, {2, 1024, false}, {2, 320, false}, {0, 4096, false}} {
		if got := fp8PersistTakes(c.nb, c.K); got != c.want {
			t.Errorf("fp8PersistTakes(%d, %d) = %v", c.nb, c.K, got)
		}
	}
	for _, c := range []struct {
		persist string
		kind    fp8Kind
		want    bool
	}{{"", fp8KindGateUp, true}, {"", fp8KindGEMV, true}, {"none", fp8KindGateUp, false}, {"none", fp8KindQKV, false}, {"gateup", fp8KindGateUp, true}, {"gateup", fp8KindQKV, false}, {"gateup", fp8KindGEMV, false},
		{"all", fp8KindGEMV, true}, {"all", fp8KindQKV, true}} {
		if got := fp8PersistOn(c.persist, c.kind); got != c.want {
			t.Errorf("fp8PersistOn(%q, %d) = %v", c.persist, c.kind, got)
		}
	}
}
