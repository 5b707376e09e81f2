package kernels

import (
	"fmt"
	"math"
)

// AttentionScratchLen is the scratch length that lets Attention use the
// caller's buffer instead of pooled ones: one score row of ctx = pos0+nTok
// values per worker goroutine.
func AttentionScratchLen(nTok, pos0 int) int { return workers() * (pos0 + nTok) }

// Attention computes causal grouped-query attention of nTok new queries at
// positions pos0..pos0+nTok-1 over a KV cache that already holds positions
// 0..pos0+nTok-1. q and out are [nTok, nHeads, d]; kCache and vCache are
// [capacity, nKV, d] (row p is position p). Query head h reads KV head
// h/(nHeads/nKV). For the token at position P:
//
//	s_p = q·k_p / sqrt(d) for p ≤ P,  a_p = exp(s_p − max s) / Σ exp(s − max s),
//	out = Σ_{p≤P} a_p·v_p
//
// in float32 (the softmax is the numerically stable two-pass form). The work
// runs in parallel over (token, head). scratch holds the score rows; if it is
// shorter than AttentionScratchLen(nTok, pos0) (nil is fine) pooled buffers
// are used instead. out must not overlap q or the caches.
func Attention(out, q, kCache, vCache []float32, nTok, pos0, nHeads, nKV, headDim int, scratch []float32) error {
	return AttentionWindow(out, q, kCache, vCache, nTok, pos0, nHeads, nKV, headDim, 0, scratch)
}

// AttentionWindow is Attention with a sliding window: the token at position
// P sees positions max(0, P−window+1)..P only (the last window positions,
// itself included), in prefill and decode alike. window 0 means no window
// (Attention).
func AttentionWindow(out, q, kCache, vCache []float32, nTok, pos0, nHeads, nKV, headDim, window int, scratch []float32) error {
	if window < 0 {
		return fmt.Errorf("kernels.Attention: sliding window %d is negative (0 means none)", window)
	}
	if nTok < 0 || pos0 < 0 || nHeads <= 0 || nKV <= 0 || headDim <= 0 {
		return fmt.Errorf("kernels.Attention: nTok %d, pos0 %d, nHeads %d, nKV %d, headDim %d: want non-negative nTok, pos0 and positive head counts and size",
			nTok, pos0, nHeads, nKV, headDim)
	}
	if nHeads%nKV != 0 {
		return fmt.Errorf("kernels.Attention: nHeads %d is not a multiple of nKV %d", nHeads, nKV)
	}
	if want := nTok * nHeads * headDim; len(q) != want || len(out) != want {
		return fmt.Errorf("kernels.Attention: q has %d and out %d values, want nTok*nHeads*headDim = %d*%d*%d = %d",
			len(q), len(out), nTok, nHeads, headDim, want)
	}
	row := nKV * headDim
	if len(kCache)%row != 0 || len(vCache) != len(kCache) {
		return fmt.Errorf("kernels.Attention: caches hold %d (k) and %d (v) values, want equal multiples of nKV*headDim = %d",
			len(kCache), len(vCache), row)
	}
	ctx := pos0 + nTok
	if capacity := len(kCache) / row; ctx > capacity {
		return fmt.Errorf("kernels.Attention: positions up to %d exceed the cache capacity %d", ctx, capacity)
	}
	if nTok == 0 {
		return nil
	}
	a := attnArgs{out, q, kCache, vCache, pos0, nHeads, nKV, headDim, ctx, window}
	units := nTok * nHeads
	// One unit is about P·d multiply-adds twice; causal prefill rows grow
	// with P, which the dynamic ranges of parallelFor balance.
	grain := max(1, gemvGrain/(2*headDim*(pos0+1+nTok/2)))
	if !splits(units, grain) {
		if len(scratch) >= ctx {
			a.units(scratch[:ctx], 0, units)
		} else {
			bp := getF32(ctx)
			a.units(*bp, 0, units)
			putF32(bp)
		}
		return nil
	}
	pa := new(attnArgs) // the closures share one copy; a itself stays on the stack
	*pa = a
	if len(scratch) >= AttentionScratchLen(nTok, pos0) {
		parallelFor(units, grain, func(w, lo, hi int) { pa.units(scratch[w*ctx:(w+1)*ctx], lo, hi) })
		return nil
	}
	parallelFor(units, grain, func(_, lo, hi int) {
		bp := getF32(ctx)
		pa.units(*bp, lo, hi)
		putF32(bp)
	})
	return nil
}

type attnArgs struct {
	out, q, k, v                    []float32
	pos0, nHeads, nKV, headDim, ctx int
	window                          int // 0: none
}

// units computes output rows u in [u0,u1), u = t*nHeads + h, using scores
// (at least ctx long) as scratch.
func (a *attnArgs) units(scores []float32, u0, u1 int) {
	d, group, stride := a.headDim, a.nHeads/a.nKV, a.nKV*a.headDim
	scale := float32(1 / math.Sqrt(float64(d)))
	for u := u0; u < u1; u++ {
		t, h := u/a.nHeads, u%a.nHeads
		kvOff := (h / group) * d
		qv := a.q[u*d : (u+1)*d]
		o := a.out[u*d : (u+1)*d]
		n := a.pos0 + t + 1 // positions lo..pos0+t are visible
		lo := 0
		if a.window > 0 {
			lo = max(0, n-a.window)
		}
		s := scores[:n-lo] // s[i] is position lo+i
		mx := float32(math.Inf(-1))
		for i := range s {
			off := (lo+i)*stride + kvOff
			s[i] = dot(qv, a.k[off:off+d]) * scale
			mx = max(mx, s[i])
		}
		var sum float32
		for p, x := range s {
			e := float32(math.Exp(float64(x - mx)))
			s[p] = e
			sum += e
		}
		clear(o)
		inv := 1 / sum
		for i, e := range s {
			off := (lo+i)*stride + kvOff
			axpy(o, a.v[off:off+d], e*inv)
		}
	}
}

// axpy computes y[i] += alpha·x[i] for i < len(y).
func axpy(y, x []float32, alpha float32) {
	x = x[:len(y)]
	i := 0
	for ; i+4 <= len(y); i += 4 {
		yy := y[i : i+4 : i+4]
		xx := x[i : i+4 : i+4]
		yy[0] += alpha * xx[0]
		yy[1] += alpha * xx[1]
		yy[2] += alpha * xx[2]
		yy[3] += alpha * xx[3]
	}
	for ; i < len(y); i++ {
		y[i] += alpha * x[i]
	}
}
