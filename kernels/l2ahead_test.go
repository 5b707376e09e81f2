package kernels

import "testing"

func TestParseL2AheadBudget(t *testing.T) {
	def := L2AheadBudget{O: 1, QKV: 2, MLP: 3}
	for _, c := range []struct {
		in   string
		want L2AheadBudget
		last bool
	}{
		{"", L2AheadBudget{}, false},
		{"0", L2AheadBudget{}, false},
		{"1", def, true},
		{"last", def, true},
		{"normal", def, false},
		{"24,8,0", L2AheadBudget{O: 24 << 20, QKV: 8 << 20}, true},
	} {
		got, last, err := ParseL2AheadBudget(c.in, def)
		if err != nil || got != c.want || last != c.last {
			t.Errorf("ParseL2AheadBudget(%q) = %+v, %v, %v; want %+v, %v", c.in, got, last, err, c.want, c.last)
		}
	}
	for _, bad := range []string{"2", "on", "1,2", "-1,2,3", "1,2,3000", "a,b,c"} {
		if _, _, err := ParseL2AheadBudget(bad, def); err == nil {
			t.Errorf("ParseL2AheadBudget(%q): no error", bad)
		}
	}
}
