package kernels

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
)

// Argmax returns the first index of the largest value of x (NaNs are
// skipped), or -1 if x is empty or all NaN.
func Argmax(x []float32) int {
	best := -1
	var bv float32
	for i, v := range x {
		if v != v {
			continue
		}
		if best < 0 || v > bv {
			best, bv = i, v
		}
	}
	return best
}

// SampleParams configures Sample. Temperature 0 means greedy (a negative one
// is an error, Validate); TopK 0 keeps every token; TopP 0 or 1 keeps every
// token.
type SampleParams struct {
	Temperature float32 // divides the logits; 0: greedy
	TopK        int     // keep the TopK most likely tokens; 0: all
	TopP        float32 // keep the most likely tokens whose mass reaches TopP; 0 or 1: all
}

// Sample draws a token id from logits. Temperature 0 returns
// Argmax(logits) (rng may then be nil). Otherwise, with p = softmax(logits/T)
// computed in float64: keep the TopK most probable tokens (all when TopK is 0
// or ≥ len(logits)); renormalise and keep the smallest prefix of them, sorted
// by decreasing probability, whose cumulative probability is ≥ TopP (all when
// TopP is 0 or 1); renormalise and draw with rng (one rng.Float64 per call).
// These are transformers' temperature, top-k and top-p warpers in that order.
// Ties sort by lower id first, and sums run in a fixed order, so a given rng
// state always gives the same token on any machine. Empty logits, NaN or +Inf
// logits, all logits -Inf, a NaN or out-of-range parameter (TopK < 0, TopP
// outside [0,1]) or a nil rng with Temperature > 0 are errors.
func Sample(logits []float32, p SampleParams, rng *rand.Rand) (int, error) {
	if len(logits) == 0 {
		return 0, errors.New("kernels.Sample: empty logits")
	}
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("kernels.Sample: %w", err)
	}
	inf := float32(math.Inf(1))
	mx, arg := -inf, -1
	for i, v := range logits {
		if !(v < inf) { // NaN or +Inf
			return 0, fmt.Errorf("kernels.Sample: logit %d of %d is %v", i, len(logits), v)
		}
		if v > mx {
			mx, arg = v, i
		}
	}
	if arg < 0 {
		return 0, fmt.Errorf("kernels.Sample: all %d logits are -Inf", len(logits))
	}
	if p.Temperature <= 0 {
		return arg, nil // Argmax(logits): the first index of the maximum
	}
	if rng == nil {
		return 0, errors.New("kernels.Sample: nil rng with temperature > 0")
	}

	s := samplerPool.Get().(*sampler)
	defer samplerPool.Put(s)
	n := len(logits)
	s.prob = slices.Grow(s.prob[:0], n)[:n]
	// The exponentials are the costly part (a Llama 3 vocabulary has 128256
	// logits): compute them in parallel, each on its own, and sum them in
	// id order so the result does not depend on the number of cores.
	invT := 1 / float64(p.Temperature)
	if splits(n, convGrain/8) {
		prob := s.prob
		parallelFor(n, convGrain/8, func(_, lo, hi int) { expScaled(prob[lo:hi], logits[lo:hi], mx, invT) })
	} else {
		expScaled(s.prob, logits, mx, invT)
	}
	var total float64
	for _, e := range s.prob {
		total += e
	}

	topP := float64(p.TopP)
	if topP == 0 {
		topP = 1
	}
	if p.TopK > 0 && p.TopK < n {
		s.topK(p.TopK)
		return s.drawPrefix(topP, rng), nil
	}
	if topP < 1 {
		cut := s.topPCut(topP*total, total)
		// Walk the tokens that sort no later than cut, in id order.
		kept := func(i int, e float64) bool { return e > cut.p || (e == cut.p && i <= int(cut.id)) }
		var mass float64
		for i, e := range s.prob {
			if kept(i, e) {
				mass += e
			}
		}
		u := rng.Float64() * mass
		var c float64
		for i, e := range s.prob {
			if kept(i, e) {
				c += e
				if u < c {
					return i, nil
				}
			}
		}
		return int(cut.id), nil // u rounded up to the mass
	}
	// No filtering: walk the distribution in id order.
	u := rng.Float64() * total
	var c float64
	last := 0
	for i, e := range s.prob {
		c += e
		if u < c {
			return i, nil
		}
		if e > 0 {
			last = i
		}
	}
	return last, nil // u rounded up to the total
}

// expScaled computes prob[i] = exp((logits[i] − mx)·invT).
func expScaled(prob []float64, logits []float32, mx float32, invT float64) {
	prob = prob[:len(logits)]
	for i, v := range logits {
		prob[i] = math.Exp((float64(v) - float64(mx)) * invT)
	}
}

// sampler is Sample's pooled scratch.
type sampler struct {
	prob []float64 // unnormalised probabilities exp((l−max)/T), by id
	cand []cand    // candidates of top-k / top-p
}

var samplerPool = sync.Pool{New: func() any { return new(sampler) }}

// cand is a candidate token with its unnormalised probability.
type cand struct {
	p  float64
	id int32
}

// before reports whether a sorts before b: higher probability first, then
// lower id.
func (a cand) before(b cand) bool { return a.p > b.p || (a.p == b.p && a.id < b.id) }

// cmp is before as a three-way comparison, for slices.SortFunc.
func (a cand) cmp(b cand) int {
	switch {
	case a.before(b):
		return -1
	case b.before(a):
		return 1
	}
	return 0
}

// topK leaves in s.cand the k most probable tokens in order, by a min-heap
// (the last in order at the root) over one pass of the vocabulary.
func (s *sampler) topK(k int) {
	h := slices.Grow(s.cand[:0], k)[:k]
	for i := range h {
		h[i] = cand{s.prob[i], int32(i)}
	}
	for i := k/2 - 1; i >= 0; i-- {
		siftDown(h, i)
	}
	for i := k; i < len(s.prob); i++ {
		if c := (cand{s.prob[i], int32(i)}); c.before(h[0]) {
			h[0] = c
			siftDown(h, 0)
		}
	}
	slices.SortFunc(h, cand.cmp)
	s.cand = h
}

// siftDown restores the heap order (every node after its children) below
// node i.
func siftDown(h []cand, i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h[c].before(h[c+1]) {
			c++ // the later child in order
		}
		if h[c].before(h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// topPCut returns the last token, in the order of cand.before, of the shortest
// prefix of that order whose mass is ≥ target: a weighted quickselect, O(n)
// expected, instead of sorting the vocabulary. It first tries the tokens with
// probability ≥ 2^-10 of the total, which usually hold the mass (a token left
// out sorts after every one kept, so their prefix is the full order's).
func (s *sampler) topPCut(target, total float64) cand {
	for _, tau := range [...]float64{0x1p-10, 0} {
		s.cand = s.cand[:0]
		var mass float64
		for i, e := range s.prob {
			if e > 0 && e >= tau*total {
				s.cand = append(s.cand, cand{e, int32(i)})
				mass += e
			}
		}
		if mass >= target || tau == 0 {
			break
		}
	}
	c := s.cand
	var acc float64 // mass of c[:lo], all before the cut or the cut itself
	lo, hi := 0, len(c)
	for rounds := 0; hi-lo > 16 && rounds < 64; rounds++ {
		// Median-of-three pivot, moved to lo; partition c[lo+1:hi] into
		// tokens before it, c[lo+1:mid], and after it.
		a, b, m := lo, lo+(hi-lo)/2, hi-1
		if c[b].before(c[a]) {
			a, b = b, a
		}
		if c[m].before(c[b]) {
			b = m
			if c[b].before(c[a]) {
				b = a
			}
		}
		c[lo], c[b] = c[b], c[lo]
		pv := c[lo]
		mid := lo + 1
		var before float64
		for i := lo + 1; i < hi; i++ {
			if c[i].before(pv) {
				before += c[i].p
				c[mid], c[i] = c[i], c[mid]
				mid++
			}
		}
		// Put the pivot between the two parts.
		c[lo], c[mid-1] = c[mid-1], c[lo]
		switch {
		case acc+before >= target: // the cut is before the pivot
			hi = mid - 1
		case acc+before+pv.p >= target: // the pivot is the cut
			return pv
		default:
			acc += before + pv.p
			lo = mid
		}
	}
	rest := c[lo:hi]
	slices.SortFunc(rest, cand.cmp)
	for _, x := range rest {
		acc += x.p
		if acc >= target {
			return x
		}
	}
	if len(rest) > 0 {
		return rest[len(rest)-1]
	}
	return c[max(lo-1, 0)] // rounding: everything before lo
}

// drawPrefix applies top-p to the sorted candidates s.cand (renormalised
// among themselves) and draws.
func (s *sampler) drawPrefix(topP float64, rng *rand.Rand) int {
	c := s.cand
	if topP < 1 {
		var mass float64
		for _, x := range c {
			mass += x.p
		}
		k, _ := prefixFor(c, topP*mass)
		c = c[:k]
	}
	return draw(c, rng)
}

// prefixFor returns the length of the shortest prefix of c whose mass is
// ≥ target (at least 1), and whether one was found before the end.
func prefixFor(c []cand, target float64) (int, bool) {
	var m float64
	for i, x := range c {
		m += x.p
		if m >= target {
			return i + 1, true
		}
	}
	return max(len(c), 1), false
}

// draw picks c[i].id with probability c[i].p / Σ c.p.
func draw(c []cand, rng *rand.Rand) int {
	var mass float64
	for _, x := range c {
		mass += x.p
	}
	u := rng.Float64() * mass
	var m float64
	for _, x := range c {
		m += x.p
		if u < m {
			return int(x.id)
		}
	}
	return int(c[len(c)-1].id) // u rounded up to the mass
}

// Validate reports parameters no sampler accepts, naming the field: a
// temperature that is negative, NaN or infinite (0 means greedy), a negative
// top-k, a top-p that is NaN or outside [0, 1]. Sample, decoder's Generate
// and the batch scheduler (models/generate) all check with it.
func (p SampleParams) Validate() error {
	t := float64(p.Temperature)
	switch {
	case t != t || math.IsInf(t, 0) || t < 0:
		return fmt.Errorf("sampling temperature %v: want a finite number ≥ 0 (0 = greedy)", p.Temperature)
	case p.TopK < 0:
		return fmt.Errorf("sampling top-k %d: want ≥ 0 (0 = every token)", p.TopK)
	case !(p.TopP >= 0 && p.TopP <= 1):
		return fmt.Errorf("sampling top-p %v: want a number in [0, 1] (0 or 1 = every token)", p.TopP)
	}
	return nil
}
