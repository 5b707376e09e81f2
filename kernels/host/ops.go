package host

import (
	"fmt"
	"math"
	"sync"

	"github.com/flextensor-go/flextensor/kernels"
)

// expf is e^x in float32 to about 2 ulp: x = n·ln2 + r (Cody–Waite, |r| ≤
// ln2/2), e^r by its degree-6 Taylor polynomial, scaled by 2^n. Above 88 it
// is +Inf; below −87 it is 0 (so 1+expf(x) rounds as 1+e^x does).
func expf(x float32) float32 {
	if x > 88 {
		return float32(math.Inf(1))
	}
	if x < -87 {
		return 0
	}
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693145751953125
		ln2lo = 1.42860682030941723212e-6
	)
	n := float32(math.Floor(float64(x*log2e) + 0.5))
	r := x - n*ln2hi - n*ln2lo
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720))))))
	return p * math.Float32frombits(uint32(int32(n)+127)<<23)
}

// siluMulGrain is the least values a SiLUMul pool chunk covers.
const siluMulGrain = 4096

// SiLUMul computes out[i] = g·σ(g)·up[i], g = gate[i], σ(g) = 1/(1+e^−g),
// with expf (within 1e-6 relative of kernels.SiLUMul), split over the pool.
// out may alias gate or up.
func (e *Engine) SiLUMul(out, gate, up []float32) error {
	if len(gate) != len(out) || len(up) != len(out) {
		return fmt.Errorf("host.SiLUMul: out, gate, up have %d, %d, %d values, want equal lengths", len(out), len(gate), len(up))
	}
	if e.k == nil {
		kernels.SiLUMul(out, gate, up)
		return nil
	}
	e.pool.Run(len(out), e.pool.Chunk(len(out), siluMulGrain, 1), func(_, lo, hi int) {
		siluMul(out[lo:hi], gate[lo:hi], up[lo:hi])
	})
	return nil
}

func siluMul(out, gate, up []float32) {
	gate, up = gate[:len(out)], up[:len(out)]
	for i, g := range gate {
		out[i] = g / (1 + expf(-g)) * up[i]
	}
}

var f32Pool = sync.Pool{New: func() any { return new([]float32) }}

// GateUpSiLU computes out[t,i] = silu(x[t]·wg[i])·(x[t]·wu[i]) for T tokens
// (Llama's MLP before the down projection): both GEMVs in one pool job,
// then SiLUMul.
func (e *Engine) GateUpSiLU(out, x []float32, T int, wg, wu kernels.Mat) error {
	for _, w := range []kernels.Mat{wg, wu} {
		if err := w.Validate(); err != nil {
			return fmt.Errorf("host.GateUpSiLU: %w", err)
		}
	}
	if wg.Rows != wu.Rows || wg.Cols != wu.Cols {
		return fmt.Errorf("host.GateUpSiLU: gate %dx%d and up %dx%d differ", wg.Rows, wg.Cols, wu.Rows, wu.Cols)
	}
	if err := checkSizes("host.GateUpSiLU", out, x, T, wg.Rows, wg.Cols); err != nil {
		return err
	}
	bp := f32Pool.Get().(*[]float32)
	defer f32Pool.Put(bp)
	if cap(*bp) < len(out) {
		*bp = make([]float32, len(out))
	}
	up := (*bp)[:len(out)]
	if e.k == nil {
		if err := kernels.MatMul(out, x, T, wg); err != nil {
			return err
		}
		if err := kernels.MatMul(up, x, T, wu); err != nil {
			return err
		}
	} else {
		e.multi(x, T, []segment{{w: fromMat(wg), out: out, ldo: wg.Rows}, {w: fromMat(wu), out: up, ldo: wu.Rows}})
	}
	return e.SiLUMul(out, out, up)
}

// Attention is kernels.AttentionWindow (causal GQA of nTok queries at
// positions pos0.. over caches [C, nKV, d], window 0: none) with the
// scores and the weighted sum in the SIMD tiles: one pool unit per (token,
// KV head), whose query heads share each K and V row read. The softmax
// uses expf; results are within 1e-5 (relative to Σ|a·v|) of the
// reference.
func (e *Engine) Attention(out, q, kCache, vCache []float32, nTok, pos0, nHeads, nKV, d, window int) error {
	if e.k == nil {
		return kernels.AttentionWindow(out, q, kCache, vCache, nTok, pos0, nHeads, nKV, d, window, nil)
	}
	if window < 0 {
		return fmt.Errorf("host.Attention: sliding window %d is negative (0 means none)", window)
	}
	if nTok < 0 || pos0 < 0 || nHeads <= 0 || nKV <= 0 || d <= 0 || nHeads%nKV != 0 {
		return fmt.Errorf("host.Attention: nTok %d, pos0 %d, nHeads %d, nKV %d, d %d: want non-negative nTok, pos0, positive sizes and nHeads a multiple of nKV",
			nTok, pos0, nHeads, nKV, d)
	}
	if want := nTok * nHeads * d; len(q) != want || len(out) != want {
		return fmt.Errorf("host.Attention: q has %d and out %d values, want nTok·nHeads·d = %d", len(q), len(out), want)
	}
	stride := nKV * d
	if len(kCache)%stride != 0 || len(vCache) != len(kCache) {
		return fmt.Errorf("host.Attention: caches hold %d (k) and %d (v) values, want equal multiples of nKV·d = %d", len(kCache), len(vCache), stride)
	}
	ctx := pos0 + nTok
	if capacity := len(kCache) / stride; ctx > capacity {
		return fmt.Errorf("host.Attention: positions up to %d exceed the cache capacity %d", ctx, capacity)
	}
	G := nHeads / nKV
	L := e.k.lanes
	scale := float32(1 / math.Sqrt(float64(d)))
	e.pool.Run(nTok*nKV, 1, func(worker, u0, u1 int) {
		sc := e.pool.Scratch(worker, G*ctx)
		for u := u0; u < u1; u++ {
			t, kvh := u/nKV, u%nKV
			n := pos0 + t + 1
			lo := 0
			if window > 0 {
				lo = max(0, n-window)
			}
			m := n - lo
			h0 := t*nHeads + kvh*G // first query head row of the group
			qg := q[h0*d : (h0+G)*d]
			dense(L, kCache, e.k.r4F32, e.k.t4F32, e.k.r2t4F32, f32Val, lo*stride+kvh*d, stride, qg, G, d, sc, m, 0, m, nil, scale)
			for g := range G {
				s := sc[g*m : (g+1)*m]
				mx := float32(math.Inf(-1))
				for _, v := range s {
					mx = max(mx, v)
				}
				var sum float32
				for i, v := range s {
					ev := expf(v - mx)
					s[i] = ev
					sum += ev
				}
				inv := 1 / sum
				o := out[(h0+g)*d : (h0+g+1)*d]
				clear(o)
				nv := d / L
				for i, a := range s {
					off := (lo+i)*stride + kvh*d
					vr := vCache[off : off+d]
					a *= inv
					if nv > 0 {
						e.k.axpy(&o[0], &vr[0], a, nv)
					}
					for c := nv * L; c < d; c++ {
						o[c] += a * vr[c]
					}
				}
			}
		}
	})
	return nil
}
