package offload

import (
	"slices"
	"testing"
)

// TestPassInfoOnOwnPlan: a pass runs its own bucket's plan when its tokens
// and the plan's differ by less than the factor that opens another bucket
// (4), or when either count is unknown.
func TestPassInfoOnOwnPlan(t *testing.T) {
	for _, c := range []struct {
		tokens, plan int
		want         bool
	}{{256, 256, true}, {256, 64, false}, {64, 256, false}, {255, 64, true}, {64, 255, true}, {1, 3, true}, {1, 4, false}, {0, 64, true}, {256, 0, true}} {
		p := PassInfo{Seq: 3, Phase: PhaseInference, Tokens: c.tokens, PlanTokens: c.plan}
		if got := p.OnOwnPlan(); got != c.want {
			t.Errorf("pass of %d tokens under a plan for %d: OnOwnPlan %v, want %v", c.tokens, c.plan, got, c.want)
		}
	}
}

// TestPassInfoSteady: only an INFERENCE pass that measured nothing, ran
// with profiling on, and had no placement change before or after it is
// steady, and its line says so; each other kind says why it is not.
func TestPassInfoSteady(t *testing.T) {
	base := PassInfo{Seq: 9, Phase: PhaseInference, Tokens: 1, Resident: 15, Streamed: 7, Host: 10, PlanTokens: 1}
	cases := []struct {
		name   string
		p      PassInfo
		steady bool
		line   string
	}{
		{"steady", base, true, "pass 9 INFERENCE T=1, plan 15/7/10 (res/str/host) for T=1, steady"},
		{"none yet", PassInfo{}, false, "no pass yet"},
		{"profiling", PassInfo{Seq: 2, Phase: PhaseProfiling, Tokens: 1}, false, "pass 2 PROFILING T=1, profiling"},
		{"measuring", func() PassInfo { p := base; p.Measured = MeasuredHost | MeasuredCopies; return p }(), false,
			"pass 9 INFERENCE T=1, plan 15/7/10 (res/str/host) for T=1, measuring host units+copies"},
		{"measuring all", func() PassInfo {
			p := base
			p.Measured = MeasuredHostWarm | MeasuredCopies | MeasuredBucket | MeasuredReplan | MeasuredTiming
			p.Bucket = 64
			return p
		}(), false,
			"pass 9 INFERENCE T=1, plan 15/7/10 (res/str/host) for T=1, measuring host units warm-up+copies+bucket 64+strategy replan+timing"},
		{"suspended", func() PassInfo { p := base; p.Suspended = true; return p }(), false,
			"pass 9 INFERENCE T=1, plan 15/7/10 (res/str/host) for T=1, profiling suspended"},
		{"changed after", func() PassInfo { p := base; p.PlanChanged = true; return p }(), false,
			"pass 9 INFERENCE T=1, plan 15/7/10 (res/str/host) for T=1, placement changed after it"},
		{"first after a change", func() PassInfo { p := base; p.AfterChange = true; return p }(), false,
			"pass 9 INFERENCE T=1, plan 15/7/10 (res/str/host) for T=1, first under a new placement"},
	}
	for _, c := range cases {
		if got := c.p.Steady(); got != c.steady {
			t.Errorf("%s: Steady() = %v, want %v", c.name, got, c.steady)
		}
		if got := c.p.String(); got != c.line {
			t.Errorf("%s: %q, want %q", c.name, got, c.line)
		}
	}
}

// TestPassBeginMeasuringNoAlloc: the engine's account of a pass that
// measures (timing, a bucket, a replan) allocates nothing once its
// placement slices have grown, and names what it measured.
func TestPassBeginMeasuringNoAlloc(t *testing.T) {
	e := &engine{m: &Manager{}, phase: PhaseInference, cfg: Config{OffloadTiming: TimingGraph},
		plan: Plan{Resident: []bool{true, false, true}}}
	e.tok.measure = &tokenBucket{ref: 32}
	e.replan.state = ReplanInProgress
	e.passBegin() // grows the placement slices
	if allocs := testing.AllocsPerRun(100, e.passBegin); allocs != 0 {
		t.Errorf("passBegin of a measuring pass: %v allocations, want 0", allocs)
	}
	if got, want := e.pass.Measuring(), []string{"bucket 32", "strategy replan", "timing"}; !slices.Equal(got, want) {
		t.Errorf("measuring %q, want %q", got, want)
	}
	if e.pass.Resident != 2 || e.pass.Streamed != 1 || e.pass.Steady() {
		t.Errorf("pass %v: want 2 resident, 1 streamed units and not steady", e.pass)
	}
}
