package kernels

import (
	"cmp"
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

// SampleParams configures Sample. Temperature ≤ 0 means greedy; TopK 0 keeps
// every token; TopP 0 or 1 keeps every token.
type SampleParams struct {
	Temperature float32
	TopK        int
	TopP        float32
}

// Sample draws a token id from logits. Temperature ≤ 0 returns
// Argmax(logits). Otherwise, with p = softmax(logits/T) computed in float64:
// keep the TopK most probable tokens (all when TopK is 0 or ≥ len(logits));
// renormalise and keep the smallest prefix of them, sorted by decreasing
// probability, whose cumulative probability is ≥ TopP (all when TopP is 0 or
// 1); renormalise and draw with rng. These are transformers' temperature,
// top-k and top-p warpers in that order. Ties sort by lower id first, so a
// given rng state always gives the same token. Empty logits, NaN or +Inf
// logits, no finite logit, a NaN or negative parameter, or TopP > 1 are
// errors.
func Sample(logits []float32, p SampleParams, rng *rand.Rand) (int, error) {
	if len(logits) == 0 {
		return 0, errors.New("kernels.Sample: empty logits")
	}
	if p.Temperature != p.Temperature || p.TopP != p.TopP || p.TopP < 0 || p.TopP > 1 || p.TopK < 0 {
		return 0, fmt.Errorf("kernels.Sample: bad parameters temperature %v, top-k %d, top-p %v (want top-k ≥ 0, 0 ≤ top-p ≤ 1)",
			p.Temperature, p.TopK, p.TopP)
	}
	mx := float32(math.Inf(-1))
	for i, v := range logits {
		if v != v || math.IsInf(float64(v), 1) {
			return 0, fmt.Errorf("kernels.Sample: logit %d of %d is %v", i, len(logits), v)
		}
		mx = max(mx, v)
	}
	if math.IsInf(float64(mx), -1) {
		return 0, fmt.Errorf("kernels.Sample: all %d logits are -Inf", len(logits))
	}
	if p.Temperature <= 0 {
		return Argmax(logits), nil
	}
	if rng == nil {
		return 0, errors.New("kernels.Sample: nil rng with temperature > 0")
	}

	s := samplerPool.Get().(*sampler)
	defer samplerPool.Put(s)
	n := len(logits)
	s.prob = slices.Grow(s.prob[:0], n)[:n]
	invT := 1 / float64(p.Temperature)
	var total float64
	for i, v := range logits {
		e := math.Exp(float64(v-mx) * invT)
		s.prob[i] = e
		total += e
	}

	topP := float64(p.TopP)
	if topP == 0 {
		topP = 1
	}
	if p.TopK > 0 && p.TopK < n {
		s.topK(p.TopK)
		return s.drawPrefix(s.idx, topP, rng), nil
	}
	if topP < 1 {
		// Sorting the whole vocabulary is the slow part: first try the
		// tokens with probability ≥ 1/1024, then ≥ (1−P)/n (whose mass
		// is ≥ P in exact arithmetic), then all. Any token left out of a
		// tier sorts after every token in it, so a prefix found inside a
		// tier is the prefix of the full order.
		for _, tau := range [...]float64{total / 1024, total * (1 - topP) / float64(n), 0} {
			s.idx = s.idx[:0]
			var mass float64
			for i, e := range s.prob {
				if e >= tau {
					s.idx = append(s.idx, int32(i))
					mass += e
				}
			}
			if mass < topP*total && tau > 0 {
				continue
			}
			s.sortIdx()
			if k, ok := prefixFor(s.prob, s.idx, topP*total); ok || tau == 0 {
				return s.draw(s.idx[:k], rng), nil
			}
		}
	}
	// No filtering: walk the distribution in id order.
	u := rng.Float64() * total
	var c float64
	for i, e := range s.prob {
		c += e
		if u < c {
			return i, nil
		}
	}
	return lastPositive(s.prob), nil
}

// sampler is Sample's pooled scratch.
type sampler struct {
	prob []float64 // unnormalised probabilities exp((l−max)/T)
	idx  []int32   // candidate ids
}

var samplerPool = sync.Pool{New: func() any { return new(sampler) }}

// before orders token ids by decreasing probability, then increasing id.
func (s *sampler) before(a, b int32) bool {
	pa, pb := s.prob[a], s.prob[b]
	return pa > pb || (pa == pb && a < b)
}

func (s *sampler) sortIdx() {
	prob := s.prob
	slices.SortFunc(s.idx, func(a, b int32) int {
		if c := cmp.Compare(prob[b], prob[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
}

// topK leaves in s.idx the k most probable ids in decreasing order, by a
// min-heap (least probable candidate at the root) over one pass of the
// vocabulary.
func (s *sampler) topK(k int) {
	s.idx = slices.Grow(s.idx[:0], k)[:k]
	h := s.idx
	for i := range h {
		h[i] = int32(i)
	}
	for i := k/2 - 1; i >= 0; i-- {
		s.siftDown(i)
	}
	for i := k; i < len(s.prob); i++ {
		if id := int32(i); s.before(id, h[0]) {
			h[0] = id
			s.siftDown(0)
		}
	}
	s.sortIdx()
}

// siftDown restores the min-heap order of s.idx below node i.
func (s *sampler) siftDown(i int) {
	h := s.idx
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && s.before(h[c], h[c+1]) {
			c++ // the less probable child
		}
		if !s.before(h[i], h[c]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// drawPrefix applies top-p to the sorted candidates ids (renormalised among
// themselves) and draws.
func (s *sampler) drawPrefix(ids []int32, topP float64, rng *rand.Rand) int {
	if topP < 1 {
		var mass float64
		for _, id := range ids {
			mass += s.prob[id]
		}
		k, _ := prefixFor(s.prob, ids, topP*mass)
		ids = ids[:k]
	}
	return s.draw(ids, rng)
}

// prefixFor returns the length of the shortest prefix of ids whose mass is
// ≥ target (at least 1), and whether one was found before the end.
func prefixFor(prob []float64, ids []int32, target float64) (int, bool) {
	var c float64
	for i, id := range ids {
		c += prob[id]
		if c >= target {
			return i + 1, true
		}
	}
	return max(len(ids), 1), false
}

// draw picks ids[i] with probability prob[ids[i]] / Σ prob[ids].
func (s *sampler) draw(ids []int32, rng *rand.Rand) int {
	var mass float64
	for _, id := range ids {
		mass += s.prob[id]
	}
	u := rng.Float64() * mass
	var c float64
	for _, id := range ids {
		c += s.prob[id]
		if u < c {
			return int(id)
		}
	}
	return int(ids[len(ids)-1]) // u rounded up to the mass
}

// lastPositive is the last id with non-zero probability (the draw's u rounded
// up to the total).
func lastPositive(prob []float64) int {
	for i := len(prob) - 1; i >= 0; i-- {
		if prob[i] > 0 {
			return i
		}
	}
	return 0
}
