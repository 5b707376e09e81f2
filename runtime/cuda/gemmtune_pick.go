package cuda

import (
	"slices"
	"time"
)

// The measurement arithmetic of GemmBF16Tuned (gemmtune.go), free of cgo so
// that it is tested without a GPU.

// gemmSampleTarget is about how long one timed sample of a candidate runs:
// enough runs between two events that the events' resolution (about half a
// microsecond) and a launch's host latency hardly count.
const gemmSampleTarget = 200 * time.Microsecond

// gemmSamplePlan says, from one run's time, how many runs make a sample
// (1 to 50) and how many samples each candidate gets (5; 3 for runs of a
// millisecond or more, where one tuning would otherwise take long).
func gemmSamplePlan(once time.Duration) (runs, samples int) {
	runs = 50
	if once > 0 {
		runs = int(min(50, max(1, (gemmSampleTarget+once-1)/once)))
	}
	samples = 5
	if once >= time.Millisecond {
		samples = 3
	}
	return runs, samples
}

// gemmSustainLead is how long BLAS.TuneSustained runs a shape's reference
// (cublasGemmEx) before timing its candidates: long enough for a GPU held
// by its power limit to settle at the clocks it sustains (tens of
// milliseconds on the H200).
const gemmSustainLead = 100 * time.Millisecond

// gemmSustainSamples is how many samples each candidate gets with
// TuneSustained, taken in turns.
const gemmSustainSamples = 7

// gemmSustainLeadRuns is how many runs of once make gemmSustainLead (at
// most 4,000, none when once is unknown).
func gemmSustainLeadRuns(once time.Duration) int {
	if once <= 0 {
		return 0
	}
	return int(min(4000, (gemmSustainLead+once-1)/once))
}

// medianDuration is the median of d (the mean of the middle two for an
// even count; 0 for none).
func medianDuration(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// pickGemmCandidate is the index of the fastest candidate: the smallest
// non-negative time (negative: it failed), the earliest on a tie, so
// candidate 0 (cublasGemmEx) keeps a shape unless another is strictly
// faster; 0 when every time is negative.
func pickGemmCandidate(ms []float64) int {
	best := 0
	for i, t := range ms {
		if t < 0 {
			continue
		}
		if ms[best] < 0 || t < ms[best] {
			best = i
		}
	}
	return best
}

// gemmBucket is the bucket of m whose measured choice a BF16 GEMM shape
// shares (GemmBF16Tuned): m itself up to 64 (decode batches, each its own
// measurement), then the smallest of 96, 128, 192, 256, 384, 512, … (64 and
// 96 times powers of two) not below m, so that shapes sharing a choice
// differ by at most 1.5× in m.
func gemmBucket(m int) int {
	if m <= 64 {
		return m
	}
	for b := 64; ; b *= 2 {
		if m <= b {
			return b
		}
		if m <= b*3/2 {
			return b * 3 / 2
		}
	}
}
