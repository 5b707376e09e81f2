package kernels

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestArgmax(t *testing.T) {
	nan := float32(math.NaN())
	for _, c := range []struct {
		x    []float32
		want int
	}{
		{nil, -1}, {[]float32{nan}, -1}, {[]float32{3}, 0}, {[]float32{1, 5, 2, 5}, 1},
		{[]float32{nan, -1, -2}, 1}, {[]float32{-1, nan, 4, 4}, 2},
		{[]float32{float32(math.Inf(-1)), float32(math.Inf(-1))}, 0},
	} {
		if got := Argmax(c.x); got != c.want {
			t.Errorf("Argmax(%v) = %d, want %d", c.x, got, c.want)
		}
	}
}

// probsOf returns logits whose softmax is p (p sums to 1).
func logitsOf(p ...float64) []float32 {
	l := make([]float32, len(p))
	for i, v := range p {
		l[i] = float32(math.Log(v))
	}
	return l
}

func TestSampleGreedy(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 15))
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		logits := randF32(r, 1+r.IntN(300))
		want := Argmax(logits)
		for _, p := range []SampleParams{{}, {TopK: 5}, {Temperature: 1, TopK: 1}, {Temperature: 0.7, TopK: 1, TopP: 0.5}} {
			if got, err := Sample(logits, p, rng); err != nil || got != want {
				t.Fatalf("Sample(%+v) = %d, %v; want argmax %d", p, got, err, want)
			}
		}
	}
	// Temperature 0 needs no rng.
	if got, err := Sample([]float32{0, 2, 1}, SampleParams{}, nil); err != nil || got != 1 {
		t.Fatalf("greedy without rng: %d, %v", got, err)
	}
}

func TestSampleDeterministic(t *testing.T) {
	logits := randF32(rand.New(rand.NewPCG(16, 16)), 5000)
	for _, p := range []SampleParams{{Temperature: 1}, {Temperature: 0.8, TopK: 40}, {Temperature: 0.8, TopP: 0.9}, {Temperature: 1.2, TopK: 100, TopP: 0.5}} {
		draw := func(seed uint64) []int {
			rng := rand.New(rand.NewPCG(seed, 7))
			var ids []int
			for range 200 {
				id, err := Sample(logits, p, rng)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			return ids
		}
		a, b, c := draw(1), draw(1), draw(2)
		if !slices.Equal(a, b) {
			t.Errorf("%+v: the same seed gave different draws", p)
		}
		if slices.Equal(a, c) {
			t.Errorf("%+v: different seeds gave the same 200 draws", p)
		}
	}
}

// checkFreq draws n tokens and compares frequencies with want (which sums to
// 1); a token with want 0 must never be drawn.
func checkFreq(t *testing.T, logits []float32, p SampleParams, want []float64) {
	t.Helper()
	const n = 100000
	rng := rand.New(rand.NewPCG(3, 4))
	count := make([]int, len(logits))
	for range n {
		id, err := Sample(logits, p, rng)
		if err != nil {
			t.Fatal(err)
		}
		count[id]++
	}
	for i, w := range want {
		f := float64(count[i]) / n
		if (w == 0 && count[i] != 0) || math.Abs(f-w) > 4*math.Sqrt(w*(1-w)/n)+1e-9 {
			t.Errorf("%+v: token %d drawn with frequency %.4f, want %.4f", p, i, f, w)
		}
	}
}

func TestSampleFrequencies(t *testing.T) {
	probs := []float64{0.5, 0.3, 0.15, 0.05}
	logits := logitsOf(probs...)
	checkFreq(t, logits, SampleParams{Temperature: 1}, probs)
	checkFreq(t, logits, SampleParams{Temperature: 1, TopP: 1}, probs)
	// Temperature 2: p ∝ sqrt(p).
	var z float64
	soft := make([]float64, len(probs))
	for i, v := range probs {
		soft[i] = math.Sqrt(v)
		z += soft[i]
	}
	for i := range soft {
		soft[i] /= z
	}
	checkFreq(t, logits, SampleParams{Temperature: 2}, soft)
	// Top-k 2: the two largest, renormalised.
	checkFreq(t, logits, SampleParams{Temperature: 1, TopK: 2}, []float64{0.625, 0.375, 0, 0})
	// Top-p 0.75: 0.5 < 0.75 ≤ 0.8, so tokens 0 and 1.
	checkFreq(t, logits, SampleParams{Temperature: 1, TopP: 0.75}, []float64{0.625, 0.375, 0, 0})
	// Top-p 0.9: 0.8 < 0.9 ≤ 0.95.
	checkFreq(t, logits, SampleParams{Temperature: 1, TopP: 0.9}, []float64{0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0})
	// Top-p 0.3: the first token alone.
	checkFreq(t, logits, SampleParams{Temperature: 1, TopP: 0.3}, []float64{1, 0, 0, 0})
	// Top-k 3 then top-p 0.85 of the renormalised 0.5/0.95, 0.3/0.95, ...:
	// 0.526 < 0.85 ≤ 0.842? no: 0.842 < 0.85, so all three stay.
	checkFreq(t, logits, SampleParams{Temperature: 1, TopK: 3, TopP: 0.85}, []float64{0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0})
	// Top-k 3 then top-p 0.8: 0.842 ≥ 0.8, so tokens 0 and 1.
	checkFreq(t, logits, SampleParams{Temperature: 1, TopK: 3, TopP: 0.8}, []float64{0.625, 0.375, 0, 0})
	// -Inf logits are never drawn.
	checkFreq(t, []float32{float32(math.Inf(-1)), 0, float32(math.Inf(-1)), 0}, SampleParams{Temperature: 1}, []float64{0, 0.5, 0, 0.5})
}

// refSupport is the naive top-k/top-p support: all ids sorted by decreasing
// probability (then id), cut to k, then to the shortest prefix with
// renormalised mass ≥ topP.
func refSupport(logits []float32, p SampleParams) []int {
	prob := make([]float64, len(logits))
	mx := slices.Max(logits)
	for i, l := range logits {
		prob[i] = math.Exp(float64(l-mx) / float64(p.Temperature))
	}
	ids := make([]int, len(logits))
	for i := range ids {
		ids[i] = i
	}
	slices.SortFunc(ids, func(a, b int) int {
		return cmp.Or(cmp.Compare(prob[b], prob[a]), cmp.Compare(a, b))
	})
	if p.TopK > 0 && p.TopK < len(ids) {
		ids = ids[:p.TopK]
	}
	var z float64
	for _, id := range ids {
		z += prob[id]
	}
	topP := float64(p.TopP)
	if topP == 0 {
		topP = 1
	}
	var c float64
	for i, id := range ids {
		c += prob[id] / z
		if c >= topP {
			return ids[:i+1]
		}
	}
	return ids
}

func TestSampleSupportLargeVocab(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 17))
	for _, c := range []struct {
		scale float32
		p     SampleParams
	}{
		{3, SampleParams{Temperature: 1, TopP: 0.5}},    // peaked: the first tier answers
		{0.01, SampleParams{Temperature: 1, TopP: 0.5}}, // nearly flat: later tiers
		{1, SampleParams{Temperature: 0.5, TopP: 0.95}}, // long tail
		{2, SampleParams{Temperature: 1, TopK: 50, TopP: 0.7}},
		{2, SampleParams{Temperature: 1, TopK: 7}},
	} {
		logits := randF32(r, 2000)
		for i := range logits {
			logits[i] *= c.scale
		}
		support := refSupport(logits, c.p)
		in := make(map[int]bool)
		for _, id := range support {
			in[id] = true
		}
		rng := rand.New(rand.NewPCG(5, 6))
		seen := make(map[int]bool)
		for range 1000 {
			id, err := Sample(logits, c.p, rng)
			if err != nil {
				t.Fatal(err)
			}
			if !in[id] {
				t.Fatalf("scale %v %+v: drew %d outside the support of %d tokens", c.scale, c.p, id, len(support))
			}
			seen[id] = true
		}
		if len(support) <= 50 && len(seen) != len(support) {
			t.Errorf("scale %v %+v: drew %d distinct tokens of a support of %d", c.scale, c.p, len(seen), len(support))
		}
		if len(support) > 50 && len(seen) < len(support)/4 {
			t.Errorf("scale %v %+v: drew only %d distinct tokens of a support of %d", c.scale, c.p, len(seen), len(support))
		}
		t.Logf("scale %v %+v: support %d tokens, %d drawn", c.scale, c.p, len(support), len(seen))
	}
}

func TestSampleErrors(t *testing.T) {
	nan := float32(math.NaN())
	rng := rand.New(rand.NewPCG(1, 1))
	for _, c := range []struct {
		logits []float32
		p      SampleParams
		rng    *rand.Rand
		want   string
	}{
		{nil, SampleParams{Temperature: 1}, rng, "empty logits"},
		{[]float32{1}, SampleParams{Temperature: nan}, rng, "temperature NaN"},
		{[]float32{1}, SampleParams{Temperature: -1}, rng, "temperature -1"},
		{[]float32{1}, SampleParams{Temperature: float32(math.Inf(1))}, rng, "temperature +Inf"},
		{[]float32{1}, SampleParams{Temperature: 1, TopP: nan}, rng, "top-p NaN"},
		{[]float32{1}, SampleParams{Temperature: 1, TopP: 1.5}, rng, "top-p 1.5"},
		{[]float32{1}, SampleParams{Temperature: 1, TopK: -1}, rng, "top-k -1"},
		{[]float32{1, nan}, SampleParams{Temperature: 1}, rng, "logit 1 of 2 is NaN"},
		{[]float32{float32(math.Inf(1))}, SampleParams{Temperature: 1}, rng, "is +Inf"},
		{[]float32{float32(math.Inf(-1))}, SampleParams{Temperature: 1}, rng, "all 1 logits are -Inf"},
		{[]float32{1}, SampleParams{Temperature: 1}, nil, "nil rng"},
	} {
		if _, err := Sample(c.logits, c.p, c.rng); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Sample(%v, %+v): %v, want an error containing %q", c.logits, c.p, err, c.want)
		}
	}
}

func ExampleSample() {
	logits := []float32{0.1, 2.5, -1, 2.4}
	greedy, _ := Sample(logits, SampleParams{}, nil)
	rng := rand.New(rand.NewPCG(42, 0))
	top1, _ := Sample(logits, SampleParams{Temperature: 0.8, TopK: 1}, rng)
	fmt.Println(greedy, top1)
	// Output: 1 1
}

func TestTopPCut(t *testing.T) {
	r := rand.New(rand.NewPCG(18, 18))
	s := new(sampler)
	for trial := range 2000 {
		n := 1 + r.IntN(3000)
		s.prob = make([]float64, n)
		var total float64
		for i := range s.prob {
			s.prob[i] = math.Exp(3 * r.NormFloat64())
			if trial%3 == 0 {
				s.prob[i] = float64(r.IntN(5)) // many ties and zeros
			}
			total += s.prob[i]
		}
		if total == 0 {
			continue
		}
		target := r.Float64() * total
		// Reference: sort everything, walk to the cut.
		var all []cand
		for i, e := range s.prob {
			if e > 0 {
				all = append(all, cand{e, int32(i)})
			}
		}
		slices.SortFunc(all, cand.cmp)
		var want cand
		var acc float64
		for _, c := range all {
			acc += c.p
			want = c
			if acc >= target {
				break
			}
		}
		if got := s.topPCut(target, total); got != want {
			t.Fatalf("trial %d (n %d): cut %+v, want %+v", trial, n, got, want)
		}
	}
}
