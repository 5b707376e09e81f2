package offload_test

import (
	"slices"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// slowBackend makes compute grow with the tokens of a forward, as on a GPU
// where a batch hides more transfer: every MatMul sleeps perRow for each
// row of its input on top of the CPU's work.
type slowBackend struct {
	kernels.Backend
	perRow time.Duration
}

func (s slowBackend) MatMul(out, x, w *runtime.Tensor) error {
	time.Sleep(time.Duration(x.NumElements()/w.Dim(-1)) * s.perRow)
	return s.Backend.MatMul(out, x, w)
}

// TestPlansPerTokens: a model profiled at one token per forward gets a plan
// for one token; passes of 256 tokens are measured once (after a warm-up)
// and switched to a plan for 256 tokens, whose prediction reflects the
// larger compute; one pass of another size changes nothing; coming back to
// a size switches to its stored plan without measuring again; passes run
// while profiling is suspended (warm-ups of other sizes) neither measure
// nor count. Every forward computes the resident model's logits bit for bit.
func TestPlansPerTokens(t *testing.T) {
	f := newFixture(t, tinyDir, 0)
	b := slowBackend{f.backend, 10 * time.Microsecond}
	cfg := offload.DefaultConfig(f.dev)
	cfg.GPUBudget = offload.Budget{Bytes: 1200 << 10}
	cfg.TransferBlocks = 2
	name := uniqueName(t)
	if err := offload.Offload(f.model, &cfg, name); err != nil {
		t.Fatal(err)
	}
	defer offload.Release(name, true)
	m := offload.GetOffloadManager(name)
	V := f.model.Cfg.VocabSize
	prompt := func(n int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32((i*7 + 3) % V)
		}
		return p
	}
	want := map[int][]float32{}
	forward := func(n int) {
		t.Helper()
		if want[n] == nil {
			want[n] = residentReference(t, tinyDir, prompt(n), 0)[0]
		}
		if got := run(t, f.model, b, prompt(n), 0)[0]; !slices.Equal(got, want[n]) {
			t.Fatalf("a forward of %d tokens differs from the resident model", n)
		}
	}
	status := func(wantTokens, measured, switches int, buckets ...int) {
		t.Helper()
		st := m.TokenPlans()
		p, err := m.Plan()
		if err != nil {
			t.Fatal(err)
		}
		if p.Tokens != wantTokens || st.PlanTokens != wantTokens || st.Measured != measured || st.Switches != switches || !slices.Equal(st.Buckets, buckets) {
			t.Fatalf("plan for %d tokens, status %+v; want a plan for %d tokens, %d measured, %d switches, buckets %v",
				p.Tokens, st, wantTokens, measured, switches, buckets)
		}
	}
	for range 1 + cfg.ProfilingIters {
		forward(1)
	}
	if m.Phase() != offload.PhaseInference {
		t.Fatalf("phase %v after discovery and profiling", m.Phase())
	}
	status(1, 0, 0, 1)
	plan1, _ := m.Plan()

	// Warm-ups of another size under SuspendProfiling: nothing measured.
	m.SuspendProfiling()
	forward(64)
	forward(64)
	if err := m.ResumeProfiling(); err != nil {
		t.Fatal(err)
	}
	status(1, 0, 0, 1)

	// 256 tokens a pass: one warm-up and ProfilingIters measured passes
	// make its plan, and the next pass of that size (the streak of 3 in a
	// row is reached) runs under it.
	passes := 0
	for p, _ := m.Plan(); p.Tokens != 256; p, _ = m.Plan() {
		if passes++; passes > 6 {
			t.Fatalf("still planned for %d tokens after %d passes of 256", p.Tokens, passes-1)
		}
		forward(256)
	}
	if passes != 2+cfg.ProfilingIters {
		t.Errorf("switched at pass %d of 256 tokens, want %d (after a warm-up and %d measured)", passes, 2+cfg.ProfilingIters, cfg.ProfilingIters)
	}
	status(256, 1, 1, 1, 256)
	plan256, _ := m.Plan()
	t.Logf("plan for 1 token: resident %v, %d slots, %.3g s; for 256: resident %v, %d slots, %.3g s", plan1.Resident, plan1.Slots, plan1.PredictedSec, plan256.Resident, plan256.Slots, plan256.PredictedSec)
	// A plan blind to tokens would predict about the same; 256 tokens of
	// compute against one measure ~9–30× here depending on the machine's
	// load, so 4× separates the two without timing flakes.
	if !(plan256.PredictedSec > 4*plan1.PredictedSec) {
		t.Errorf("plan for 256 tokens predicts %.3g s, for 1 token %.3g s: want the larger compute reflected", plan256.PredictedSec, plan1.PredictedSec)
	}

	// One pass of one token (a lone decode step) changes nothing.
	forward(1)
	forward(256)
	status(256, 1, 1, 1, 256)
	// Three in a row switch back to the stored plan, without measuring.
	for range 3 {
		forward(1)
	}
	status(1, 1, 2, 1, 256)
	if p, _ := m.Plan(); p.PredictedSec != plan1.PredictedSec {
		t.Errorf("back at 1 token: prediction %.3g s, want the stored plan's %.3g s", p.PredictedSec, plan1.PredictedSec)
	}
	// A size near a bucket (200 tokens, within ×4 of 256) uses its plan.
	for range 3 {
		forward(200)
	}
	status(256, 1, 3, 1, 256)
}
