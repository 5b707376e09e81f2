package kernels

import (
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestParseL2Branch: FT_L2_BRANCH's kinds, MiB caps (one for all, three
// apart), block count and mode, the defaults, and clear errors naming the
// bad value.
func TestParseL2Branch(t *testing.T) {
	for _, c := range []struct {
		kinds string
		want  L2BranchKind
	}{{"", 0}, {"0", 0}, {"o", L2BranchO}, {"qkv", L2BranchQKV}, {"gu", L2BranchGU},
		{"o,gu", L2BranchO | L2BranchGU}, {"all", L2BranchO | L2BranchQKV | L2BranchGU}} {
		p, err := ParseL2Branch(c.kinds, "", "", "")
		if err != nil || p.Kinds != c.want {
			t.Errorf("kinds %q: %v, %v; want %v", c.kinds, p.Kinds, err, c.want)
		}
		if p.O != 24<<20 || p.QKV != 8<<20 || p.GU != 8<<20 || p.Blocks != 48 || p.Mode != L2BranchBulk {
			t.Errorf("kinds %q: defaults %+v", c.kinds, p)
		}
	}
	p, err := ParseL2Branch("all", "16", "64", "last")
	if err != nil || p.O != 16<<20 || p.QKV != 16<<20 || p.GU != 16<<20 || p.Blocks != 64 || p.Mode != L2BranchLast {
		t.Errorf("all,16,64,last: %+v, %v", p, err)
	}
	p, err = ParseL2Branch("o,qkv", "32,4,0.5", "", "line")
	if err != nil || p.O != 32<<20 || p.QKV != 4<<20 || p.GU != 512<<10 || p.Mode != L2BranchLine {
		t.Errorf("o,qkv 32,4,0.5 line: %+v, %v", p, err)
	}
	if p.Cap(L2BranchO) != 32<<20 || p.Cap(L2BranchQKV) != 4<<20 || p.Cap(L2BranchGU) != 0 {
		t.Errorf("caps of o,qkv: %d %d %d (gu not in the plan: 0)", p.Cap(L2BranchO), p.Cap(L2BranchQKV), p.Cap(L2BranchGU))
	}
	for _, bad := range []struct{ kinds, mib, blocks, mode, names string }{
		{"down", "", "", "", `"down"`}, {"o", "1,2", "", "", `"1,2"`}, {"o", "x", "", "", `"x"`},
		{"o", "-1", "", "", `"-1"`}, {"o", "", "0", "", `"0"`}, {"o", "", "", "fast", `"fast"`},
	} {
		if _, err := ParseL2Branch(bad.kinds, bad.mib, bad.blocks, bad.mode); err == nil || !strings.Contains(err.Error(), bad.names) {
			t.Errorf("%+v: error %v, want one naming %s", bad, err, bad.names)
		}
	}
	for _, k := range []L2BranchKind{L2BranchO, L2BranchQKV, L2BranchGU} {
		if p, err := ParseL2Branch(k.String(), "", "", ""); err != nil || p.Kinds != k {
			t.Errorf("round trip of %v: %v, %v", k, p.Kinds, err)
		}
	}
}

// TestPlanL2Regions: a prefix in order within the budget, an even split
// with what a small weight lacks going to the others, weights of another
// device or nil left out, nothing for a zero budget.
func TestPlanL2Regions(t *testing.T) {
	d1, d2 := runtime.NewCPUNamed("cpu-a", 0), runtime.NewCPUNamed("cpu-b", 0)
	mk := func(dev runtime.Device, rows int) *runtime.Tensor {
		x, err := runtime.NewTensor(dev, runtime.BF16, runtime.Shape{rows, 512}, "w") // 1 KiB a row
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { x.Buffer().Free() })
		return x
	}
	q, k, v, other := mk(d1, 32), mk(d1, 8), mk(d1, 8), mk(d2, 8) // 32, 8, 8, 8 KiB
	type reg struct {
		t *runtime.Tensor
		n int64
	}
	check := func(name string, got []L2Region, want ...reg) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d regions, want %d", name, len(got), len(want))
		}
		for i := range want {
			if got[i].T != want[i].t || got[i].Bytes != want[i].n {
				t.Errorf("%s: region %d = %v %d bytes, want %v %d", name, i, got[i].T.Shape(), got[i].Bytes, want[i].t.Shape(), want[i].n)
			}
		}
		if err := CheckL2Regions(d1, got); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	check("prefix inside q", PlanL2Regions(d1, 10<<10, false, q, k, v), reg{q, 10 << 10})
	check("prefix past q", PlanL2Regions(d1, 36<<10, false, q, k, v), reg{q, 32 << 10}, reg{k, 4 << 10})
	check("prefix of all", PlanL2Regions(d1, 1<<20, false, q, k, v), reg{q, 32 << 10}, reg{k, 8 << 10}, reg{v, 8 << 10})
	check("split even", PlanL2Regions(d1, 8<<10, true, q, k), reg{q, 4 << 10}, reg{k, 4 << 10})
	check("split, small one full", PlanL2Regions(d1, 24<<10, true, q, k), reg{q, 16 << 10}, reg{k, 8 << 10})
	check("other device and nil left out", PlanL2Regions(d1, 6<<10, false, other, nil, k), reg{k, 6 << 10})
	check("zero budget", PlanL2Regions(d1, 0, true, q, k))
	if err := CheckL2Regions(d1, []L2Region{{q, 1}, {k, 1}, {v, 1}, {q, 1}}); err == nil {
		t.Error("four regions: no error")
	}
	for _, bad := range []L2Region{{nil, 0}, {other, 1}, {q, -1}, {q, 32<<10 + 1}} {
		if err := CheckL2Regions(d1, []L2Region{bad}); err == nil {
			t.Errorf("region %+v: no error", bad)
		}
	}
}
