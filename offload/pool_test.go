package offload

import (
	"math"
	"math/rand/v2"
	"testing"
)

// simulatePool runs a synthetic MoE decode trace through the pool's real
// eviction code (victim, evict, hold; no device): each pass, each layer
// routes to k distinct experts drawn from its popularity (weights), the
// layer announces them and then calls each. It returns the share of calls
// that found their expert in a slot.
func simulatePool(policy EvictionPolicy, slots, layers, experts, k, passes int, weights func(e int) float64, seed uint64) float64 {
	p := &pool{policy: policy, prior: 2, holder: make([]*unit, slots), want: make([]int, slots), busy: make([]bool, slots), last: make([]uint64, slots)}
	rng := rand.New(rand.NewPCG(seed, 7))
	units := make([][]*unit, layers)
	perm := make([][]int, layers) // each layer's popularity order differs
	var wsum float64
	for e := 0; e < experts; e++ {
		wsum += weights(e)
	}
	for l := range units {
		perm[l] = rng.Perm(experts)
		for e := 0; e < experts; e++ {
			// The profiled frequency: the expected calls per pass.
			units[l] = append(units[l], &unit{pslot: -1, freq: float64(k) * weights(perm[l][e]) / wsum})
		}
	}
	var calls, hits int
	for pass := 0; pass < passes; pass++ {
		for l := 0; l < layers; l++ {
			chosen := map[int]bool{}
			var next []*unit
			for len(next) < k {
				r := rng.Float64() * wsum
				e := 0
				for ; e < experts-1 && r >= weights(perm[l][e]); e++ {
					r -= weights(perm[l][e])
				}
				if !chosen[e] {
					chosen[e] = true
					next = append(next, units[l][e])
				}
			}
			for _, u := range next { // announce
				if u.pslot < 0 {
					if s := p.victim(false); s >= 0 {
						p.evict(s)
						p.hold(s, u)
						u.copied = true
					}
				}
				if u.pslot >= 0 {
					p.want[u.pslot]++
				}
			}
			for _, u := range next { // enter, run, exit
				if u.pslot < 0 {
					s := p.victim(true)
					p.evict(s)
					p.hold(s, u)
					u.copied = true
				}
				calls++
				if !u.copied {
					hits++
				}
				u.copied = false
				u.seen++
				if p.want[u.pslot] > 0 {
					p.want[u.pslot]--
				}
				p.clock++
				p.last[u.pslot] = p.clock
			}
		}
		for s := range p.want {
			p.want[s] = 0
		}
	}
	return float64(hits) / float64(calls)
}

// TestPoolEvictionPolicies measures LRU against frequency-based eviction
// on synthetic decode traces (24 layers of 64 experts, top 4, a pool of
// 256 slots: a sixth of the experts). With skewed routing (Zipf, exponent
// 1) the frequency policy keeps the hot experts of every layer and hits
// far more often: LRU evicts the experts of a layer before the next pass
// reaches that layer again (a cyclic access pattern larger than the pool).
// With uniform routing no policy can do much better than the pool's share
// of the experts, and the frequency policy is not worse than LRU. This is
// why EvictFrequency is the default.
func TestPoolEvictionPolicies(t *testing.T) {
	const layers, experts, k, slots, passes = 24, 64, 4, 256, 300
	for _, c := range []struct {
		name   string
		weight func(e int) float64
	}{
		{"zipf", func(e int) float64 { return 1 / float64(e+1) }},
		{"uniform", func(int) float64 { return 1 }},
	} {
		lru := simulatePool(EvictLRU, slots, layers, experts, k, passes, c.weight, 1)
		freq := simulatePool(EvictFrequency, slots, layers, experts, k, passes, c.weight, 1)
		t.Logf("%s routing: hit rate LRU %.1f%%, frequency %.1f%% (pool of %d slots for %d experts)", c.name, 100*lru, 100*freq, slots, layers*experts)
		switch c.name {
		case "zipf":
			if freq < lru+0.1 {
				t.Errorf("zipf: frequency eviction hits %.3f, LRU %.3f; want frequency clearly better", freq, lru)
			}
		case "uniform":
			share := float64(slots) / float64(layers*experts)
			if freq < lru-0.02 || math.Abs(freq-share) > 0.1 {
				t.Errorf("uniform: frequency %.3f, LRU %.3f, pool share %.3f", freq, lru, share)
			}
		}
	}
}
