package host

import (
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
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
	// Each product is rounded alone (the float32 conversions forbid fused
	// multiply-adds, which GOAMD64=v3 would allow): siluMulAVX512 mirrors
	// these steps bit for bit.
	n := float32(math.Floor(float64(float32(x*log2e)) + 0.5))
	r := x - float32(n*ln2hi) - float32(n*ln2lo)
	q := float32(r*(1.0/720)) + 1.0/120
	q = float32(r*q) + 1.0/24
	q = float32(r*q) + 1.0/6
	q = float32(r*q) + 1.0/2
	q = float32(r*q) + 1
	p := float32(r*q) + 1
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

// siluMul computes out[i] = g/(1 + expf(−g))·up[i] over len(out) values:
// 16 at a time in AVX-512 where the CPU has it (the same bits: each step
// rounded alone as here), the rest in Go. out may alias gate or up.
func siluMul(out, gate, up []float32) {
	gate, up = gate[:len(out)], up[:len(out)]
	n := 0
	if hasAVX512 && len(out) >= 16 {
		n = len(out) / 16 * 16
		siluMulAVX512(&out[0], &gate[0], &up[0], n/16)
	}
	siluMulScalar(out[n:], gate[n:], up[n:])
}

// siluMulScalar is siluMul in Go.
func siluMulScalar(out, gate, up []float32) {
	gate, up = gate[:len(out)], up[:len(out)]
	for i, g := range gate {
		out[i] = g / (1 + expf(-g)) * up[i]
	}
}

// GateUpSiLU computes out[t,i] = silu(x[t]·wg[i])·(x[t]·wu[i]) for T tokens
// (Llama's MLP before the down projection) in one pool job: each chunk of
// rows computes its gate rows into out and its up rows into the worker's
// scratch, then applies SiLU·up to them while they are in cache, so there
// is no second pass (nor a second hand-off to the workers).
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
	if e.k == nil {
		up := make([]float32, len(out))
		if err := kernels.MatMul(out, x, T, wg); err != nil {
			return err
		}
		if err := kernels.MatMul(up, x, T, wu); err != nil {
			return err
		}
		kernels.SiLUMul(out, out, up)
		return nil
	}
	n, k := wg.Rows, wg.Cols
	if T == 0 || n == 0 {
		return nil
	}
	if k == 0 {
		clear(out) // silu(0)·0
		return nil
	}
	if T >= amxMinTokens && e.amx > 0 && e.amxGateUp(out, x, T, wg, wu) {
		return nil
	}
	ph := e.gateUpPhase(out, x, T, wg, wu)
	e.pool.Run(ph.N, ph.Chunk, ph.Fn)
	return nil
}

// gateUpPhase is GateUpSiLU's pool job for checked operands with T, rows
// and columns non-zero.
func (e *Engine) gateUpPhase(out, x []float32, T int, wg, wu kernels.Mat) Phase {
	return e.gateUpPhaseIn(new(gateUpJob), out, x, T, wg, wu)
}

// gateUpJob is a gateUpPhase job's state (reused as multiJob is).
type gateUpJob struct {
	e      *Engine
	out, x []float32
	T, n   int
	g, u   weight
	fn     func(worker, lo, hi int)
}

// gateUpPhaseIn is gateUpPhase keeping its state in j.
func (e *Engine) gateUpPhaseIn(j *gateUpJob, out, x []float32, T int, wg, wu kernels.Mat) Phase {
	if j.fn == nil {
		j.fn = j.run
	}
	n := wg.Rows
	j.e, j.out, j.x, j.T, j.n = e, out, x, T, n
	j.g, j.u = fromMat(wg), fromMat(wu)
	nq := (n + 3) / 4
	bytes := 2 * n * wg.Cols * j.g.elemSize()
	chunk := e.gemvChunk(nq, bytes)
	return Phase{N: nq, Chunk: chunk, Fn: j.fn}
}

// run is the job's Fn: quads [lo,hi) of the gate and up rows.
func (j *gateUpJob) run(worker, lo, hi int) {
	e, out, x, T, n := j.e, j.out, j.x, j.T, j.n
	j0, j1 := 4*lo, min(4*hi, n)
	m := j1 - j0
	up := e.pool.Scratch(worker, T*m)
	e.denseRows(worker, &j.g, x, T, j0, j1, out[j0:], n)
	e.denseRows(worker, &j.u, x, T, j0, j1, up, m)
	for t := range T {
		o := out[t*n+j0 : t*n+j1]
		siluMul(o, o, up[t*m:(t+1)*m])
	}
}

// denseRows computes rows [j0,j1) of the BF16, F16 or F32 weight w for T
// tokens into out[t·ldo + (j−j0)]: the same tiles (so the same bits) as
// rows.
func (e *Engine) denseRows(worker int, w *weight, x []float32, T, j0, j1 int, out []float32, ldo int) {
	m, k := j1-j0, w.cols
	switch w.dt {
	case runtime.BF16:
		dense(e.pool.tile(worker), e.k.lanes, w.half, e.k.r4BF16, e.k.t4BF16, e.k.r2t4BF16, bf16Val, j0*k, k, x, T, k, out, ldo, 0, m, nil, 1, false)
	case runtime.F16:
		dense(e.pool.tile(worker), e.k.lanes, w.half, e.k.r4F16, e.k.t4F16, e.k.r2t4F16, f16Val, j0*k, k, x, T, k, out, ldo, 0, m, nil, 1, false)
	case runtime.F32:
		dense(e.pool.tile(worker), e.k.lanes, w.f32, e.k.r4F32, e.k.t4F32, e.k.r2t4F32, f32Val, j0*k, k, x, T, k, out, ldo, 0, m, nil, 1, false)
	default:
		panic(fmt.Sprintf("host: denseRows of a %v weight", w.dt))
	}
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
	if err := checkAttention(out, q, kCache, vCache, nTok, pos0, nHeads, nKV, d, window); err != nil {
		return err
	}
	ph, release := e.attnPhase(out, q, kCache, vCache, nTok, pos0, nHeads, nKV, d, window)
	e.pool.Run(ph.N, ph.Chunk, ph.Fn)
	release()
	return nil
}

// attnPhase is Attention's pool job for checked operands; release returns
// its state once the job is done.
func (e *Engine) attnPhase(out, q, kCache, vCache []float32, nTok, pos0, nHeads, nKV, d, window int) (ph Phase, release func()) {
	j := attnJobPool.Get().(*attnJob)
	return e.attnPhaseIn(j, out, q, kCache, vCache, nTok, pos0, nHeads, nKV, d, window), func() { attnJobPool.Put(j) }
}

// attnJob is an attention job's state: operands, sizes and, split
// (attentionSplit), the partials. A decode step's phases keep theirs from
// step to step (decodeState); Attention takes one from attnJobPool.
type attnJob struct {
	e                                     *Engine
	out, q, kCache, vCache                []float32
	nTok, pos0, nHeads, nKV, d, window, S int
	scr                                   attnScratch
	fn, splitFn                           func(worker, lo, hi int)
}

var attnJobPool = sync.Pool{New: func() any { return new(attnJob) }}

// attnPhaseIn is attnPhase keeping its state in j.
func (e *Engine) attnPhaseIn(j *attnJob, out, q, kCache, vCache []float32, nTok, pos0, nHeads, nKV, d, window int) Phase {
	if j.fn == nil {
		j.fn, j.splitFn = j.run, j.runSplit
	}
	j.e, j.out, j.q, j.kCache, j.vCache = e, out, q, kCache, vCache
	j.nTok, j.pos0, j.nHeads, j.nKV, j.d, j.window = nTok, pos0, nHeads, nKV, d, window
	ctx := pos0 + nTok
	if S := e.attnSplits(nTok*nKV, ctx); S > 1 {
		return j.split(S)
	}
	return Phase{N: nTok * nKV, Chunk: 1, Fn: j.fn}
}

// run is the unsplit job's Fn: (token, KV head) units [u0,u1).
func (j *attnJob) run(worker, u0, u1 int) {
	e, out, q, kCache, vCache := j.e, j.out, j.q, j.kCache, j.vCache
	nHeads, nKV, d, pos0, window := j.nHeads, j.nKV, j.d, j.pos0, j.window
	G := nHeads / nKV
	L := e.k.lanes
	stride := nKV * d
	ctx := pos0 + j.nTok
	scale := float32(1 / math.Sqrt(float64(d)))
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
		dense(e.pool.tile(worker), L, kCache, e.k.r4F32, e.k.t4F32, e.k.r2t4F32, f32Val, lo*stride+kvh*d, stride, qg, G, d, sc, m, 0, m, nil, scale, false)
		for g := range G {
			s := sc[g*m : (g+1)*m]
			_, sum := expShift(s)
			inv := 1 / sum
			o := out[(h0+g)*d : (h0+g+1)*d]
			clear(o)
			if attnOnePass {
				for i := range s {
					s[i] *= inv
				}
				continue
			}
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
		if attnOnePass {
			e.axpyHeads(out[h0*d:], d, vCache, sc, m, G, lo*stride+kvh*d, stride, d)
		}
	}
}

// attnMinSplit is the fewest cached positions a split of one (token, KV
// head) unit reads.
const attnMinSplit = 64

// attnSplits is how many splits of the positions each of units (token, KV
// head) attention units gets: 1 when the units alone keep every thread
// busy (two each) or the context is short, else enough to, each at least
// attnMinSplit positions long.
func (e *Engine) attnSplits(units, ctx int) int {
	want := 2 * e.pool.Threads()
	if units >= want || ctx < 2*attnMinSplit {
		return 1
	}
	return max(1, min((want+units-1)/units, ctx/attnMinSplit))
}

// attnScratch is attentionSplit's per-call state: each split's partial
// softmax (max, sum, unnormalised output) per query head, and per unit the
// count of its splits done.
type attnScratch struct {
	part []float32
	cnt  []atomic.Int32
}

// split readies j (operands set) for split attention and returns its
// phase: each (token, KV head) unit's positions cut into S splits run as
// separate pool items (flash-decoding): a split
// leaves its heads' running max, sum of exponentials and unnormalised
// weighted sum of V rows, and the split that finishes a unit last merges
// its S partials into out. It keeps every thread busy when there are fewer
// units than threads (one decode token, 8 KV heads, 16 threads).
func (j *attnJob) split(S int) Phase {
	j.S = S
	G := j.nHeads / j.nKV
	units := j.nTok * j.nKV
	per := j.d + 2 // a head's partial: max, sum, o[d]
	st := &j.scr
	if need := units * S * G * per; cap(st.part) < need {
		st.part = make([]float32, need)
	}
	if cap(st.cnt) < units {
		st.cnt = make([]atomic.Int32, units)
	}
	for i := range st.cnt[:units] {
		st.cnt[i].Store(0)
	}
	return Phase{N: units * S, Chunk: 1, Fn: j.splitFn}
}

// runSplit is the split job's Fn: items [i0,i1), item i split i%S of unit
// i/S.
func (j *attnJob) runSplit(worker, i0, i1 int) {
	e, out, q, kCache, vCache := j.e, j.out, j.q, j.kCache, j.vCache
	nHeads, nKV, d, pos0, window, S := j.nHeads, j.nKV, j.d, j.pos0, j.window, j.S
	G := nHeads / nKV
	L := e.k.lanes
	stride := nKV * d
	scale := float32(1 / math.Sqrt(float64(d)))
	units := j.nTok * nKV
	per := d + 2
	part, cnt := j.scr.part, j.scr.cnt[:units]
	ctx := pos0 + j.nTok
	sc := e.pool.Scratch(worker, G*((ctx+S-1)/S+1))
	for i := i0; i < i1; i++ {
		u, sp := i/S, i%S
		t, kvh := u/nKV, u%nKV
		n := pos0 + t + 1
		lo := 0
		if window > 0 {
			lo = max(0, n-window)
		}
		span := (n - lo + S - 1) / S
		a := lo + sp*span
		b := min(n, a+span)
		h0 := t*nHeads + kvh*G
		pp := part[(u*S+sp)*G*per : (u*S+sp+1)*G*per]
		if a >= b {
			for g := range G {
				pp[g*per] = float32(math.Inf(-1))
				pp[g*per+1] = 0
			}
		} else {
			m := b - a
			qg := q[h0*d : (h0+G)*d]
			dense(e.pool.tile(worker), L, kCache, e.k.r4F32, e.k.t4F32, e.k.r2t4F32, f32Val, a*stride+kvh*d, stride, qg, G, d, sc, m, 0, m, nil, scale, false)
			for g := range G {
				sg := sc[g*m : (g+1)*m]
				mx, sum := expShift(sg)
				o := pp[g*per+2 : (g+1)*per]
				clear(o)
				if !attnOnePass {
					e.axpyRows(o, vCache, sg, a*stride+kvh*d, stride, d)
				}
				pp[g*per], pp[g*per+1] = mx, sum
			}
			if attnOnePass {
				e.axpyHeads(pp[2:], per, vCache, sc, m, G, a*stride+kvh*d, stride, d)
			}
		}
		if cnt[u].Add(1) != int32(S) {
			continue
		}
		// The last split of unit u merges its S partials.
		up := part[u*S*G*per : (u+1)*S*G*per]
		for g := range G {
			mx := float32(math.Inf(-1))
			for s := range S {
				if p := up[(s*G+g)*per:]; p[1] > 0 {
					mx = max(mx, p[0])
				}
			}
			o := out[(h0+g)*d : (h0+g+1)*d]
			clear(o)
			var sum float32
			for s := range S {
				p := up[(s*G+g)*per : (s*G+g+1)*per]
				if p[1] == 0 {
					continue
				}
				f := expf(p[0] - mx)
				sum += f * p[1]
				e.axpyRows(o, p[2:], []float32{f}, 0, 0, d)
			}
			inv := 1 / sum
			for c := range o {
				o[c] *= inv
			}
		}
	}
}

// axpyRows sets o += Σ_i a[i]·v[off+i·stride : off+i·stride+d].
func (e *Engine) axpyRows(o, v, a []float32, off, stride, d int) {
	L := e.k.lanes
	nv := d / L
	for i, ai := range a {
		vr := v[off+i*stride : off+i*stride+d]
		if nv > 0 {
			e.k.axpy(&o[0], &vr[0], ai, nv)
		}
		for c := nv * L; c < d; c++ {
			o[c] += ai * vr[c]
		}
	}
}

// checkAttention validates Attention's operands.
func checkAttention(out, q, kCache, vCache []float32, nTok, pos0, nHeads, nKV, d, window int) error {
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
	return nil
}

// attnOnePass is whether attention applies each V row to all of its
// group's query heads while the row is in L1 (axpyHeads: one pass over the
// V cache) rather than one pass per head (FT_HOST_ATTN=legacy); the sums
// run in the same order either way (the same bits).
var attnOnePass = os.Getenv("FT_HOST_ATTN") != "legacy"

// axpyHeads sets o_g += Σ_i a[g·m+i]·v[off+i·stride : off+i·stride+d] for
// g < G, o_g = o[g·ostride : g·ostride+d], in one pass over the m rows of
// v: each row is added into every head's output while it is in cache.
func (e *Engine) axpyHeads(o []float32, ostride int, v, a []float32, m, G, off, stride, d int) {
	e.axpyHeadsLd(o, ostride, v, a, m, m, G, off, stride, d)
}

// axpyHeadsLd is axpyHeads with head g's weights at a[g·lda+i] (lda ≥ m):
// a run of m rows out of a longer list of weights, as the paged attention
// takes a block's rows at a time.
func (e *Engine) axpyHeadsLd(o []float32, ostride int, v, a []float32, lda, m, G, off, stride, d int) {
	if m == 0 {
		return
	}
	g0 := 0
	if C := e.k.wsumCols; e.k.wsum4 != nil && d%C == 0 {
		// Four heads at a time, C columns at a time, in registers.
		_ = v[off+(m-1)*stride+d-1]
		_ = a[(G-1)*lda+m-1]
		for ; g0+4 <= G; g0 += 4 {
			for c := 0; c < d; c += C {
				e.k.wsum4(&o[g0*ostride+c], &o[(g0+1)*ostride+c], &o[(g0+2)*ostride+c], &o[(g0+3)*ostride+c],
					&a[g0*lda], uintptr(4*lda), &v[off+c], uintptr(4*stride), m)
			}
		}
		if g0 == G {
			return
		}
	}
	L := e.k.lanes
	nv := d / L
	for i := range m {
		vr := v[off+i*stride : off+i*stride+d]
		for g := g0; g < G; g++ {
			og := o[g*ostride : g*ostride+d]
			ai := a[g*lda+i]
			if nv > 0 {
				e.k.axpy(&og[0], &vr[0], ai, nv)
			}
			for c := nv * L; c < d; c++ {
				og[c] += ai * vr[c]
			}
		}
	}
}

// expShift replaces each score of s by exp(score − max) and returns the
// maximum and the sum of the exponentials: a softmax before its division,
// shared by the host attention's whole-context and split paths.
func expShift(s []float32) (mx, sum float32) {
	mx = float32(math.Inf(-1))
	n := 0
	if hasAVX512 && len(s) >= 16 {
		n = len(s) / 16 * 16
		var lanes [16]float32
		maxAVX512(&s[0], n/16, &lanes)
		for _, v := range lanes {
			mx = max(mx, v)
		}
	}
	for _, v := range s[n:] {
		mx = max(mx, v)
	}
	if n > 0 {
		// expf's bits 16 at a time, summed a lane at a time, the lanes
		// then in order.
		var lanes [16]float32
		expShiftAVX512(&s[0], &s[0], mx, n/16, &lanes)
		for _, v := range lanes {
			sum += v
		}
	}
	for i := n; i < len(s); i++ {
		ev := expf(s[i] - mx)
		s[i] = ev
		sum += ev
	}
	return mx, sum
}
