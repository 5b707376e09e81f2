package cuda

import (
	"testing"
	"time"
)

func TestGemmSamplePlan(t *testing.T) {
	for _, c := range []struct {
		once          time.Duration
		runs, samples int
	}{
		{10 * time.Microsecond, 20, 5},
		{7 * time.Microsecond, 29, 5}, // rounded up
		{1 * time.Microsecond, 50, 5}, // capped
		{0, 50, 5},                    // below the events' resolution
		{150 * time.Microsecond, 2, 5},
		{300 * time.Microsecond, 1, 5},
		{5 * time.Millisecond, 1, 3},
	} {
		runs, samples := gemmSamplePlan(c.once)
		if runs != c.runs || samples != c.samples {
			t.Errorf("gemmSamplePlan(%v) = %d runs, %d samples; want %d, %d", c.once, runs, samples, c.runs, c.samples)
		}
	}
}

// TestGemmSustainLeadRuns: TuneSustained's lead-in is about 100 ms of the
// reference's runs, rounded up, at most 4,000 runs, none when a run's time
// is unknown.
func TestGemmSustainLeadRuns(t *testing.T) {
	for _, c := range []struct {
		once time.Duration
		want int
	}{
		{1200 * time.Microsecond, 84}, // gate/up at 8,192 tokens
		{10 * time.Millisecond, 10},
		{15 * time.Microsecond, 4000}, // capped
		{0, 0},
	} {
		if got := gemmSustainLeadRuns(c.once); got != c.want {
			t.Errorf("gemmSustainLeadRuns(%v) = %d, want %d", c.once, got, c.want)
		}
	}
}

func TestMedianDuration(t *testing.T) {
	in := []time.Duration{5, 1, 9, 3, 7}
	if got := medianDuration(in); got != 5 {
		t.Errorf("median of %v = %v, want 5", in, got)
	}
	if in[0] != 5 {
		t.Error("medianDuration sorted its argument in place")
	}
	if got := medianDuration([]time.Duration{4, 1, 3, 10}); got != 3 {
		t.Errorf("median of an even count = %v, want 3 (mean of 3 and 4, truncated)", got)
	}
	if got := medianDuration(nil); got != 0 {
		t.Errorf("median of none = %v", got)
	}
}

func TestPickGemmCandidate(t *testing.T) {
	for _, c := range []struct {
		ms   []float64
		want int
	}{
		{[]float64{0.05, 0.04, 0.06}, 1},
		{[]float64{0.04, 0.04, 0.05}, 0}, // a tie keeps cublasGemmEx
		{[]float64{0.05, -1, 0.045}, 2},  // a failed candidate is never picked
		{[]float64{-1, -1, 0.2}, 2},
		{[]float64{-1, -1}, 0},
		{[]float64{0.03}, 0},
	} {
		if got := pickGemmCandidate(c.ms); got != c.want {
			t.Errorf("pickGemmCandidate(%v) = %d, want %d", c.ms, got, c.want)
		}
	}
}

func TestGemmBucket(t *testing.T) {
	for m, want := range map[int]int{1: 1, 7: 7, 64: 64, 65: 96, 96: 96, 97: 128, 128: 128, 129: 192, 256: 256, 300: 384,
		384: 384, 385: 512, 2048: 2048, 2049: 3072, 8192: 8192, 32768: 32768, 40000: 49152} {
		if got := gemmBucket(m); got != want {
			t.Errorf("gemmBucket(%d) = %d, want %d", m, got, want)
		}
	}
	for m := 65; m < 100000; m++ {
		if b := gemmBucket(m); b < m || 2*b > 3*m {
			t.Fatalf("gemmBucket(%d) = %d: below m or above 1.5·m", m, b)
		}
	}
}
