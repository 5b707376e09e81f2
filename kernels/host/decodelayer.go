package host

import (
	"fmt"
	"math"
	"os"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

var _ kernels.DecodeLayerer = (*Backend)(nil)

// How DecodeLayer runs (Options.FusedLayer, FT_HOST_LAYER).
const (
	layerOff    = iota // declines: the decoder runs the separate ops
	layerPhased        // one pool job of five phases (the default)
	layerJobs          // five pool jobs
)

// layerModeFrom resolves Options.FusedLayer (1 one job, 2 five jobs, −1
// off, 0: the environment's FT_HOST_LAYER — "0" off, "jobs" five jobs,
// "1" or unset one job).
func layerModeFrom(o int) (int, error) {
	switch {
	case o < 0:
		return layerOff, nil
	case o == 1:
		return layerPhased, nil
	case o == 2:
		return layerJobs, nil
	case o > 2:
		return 0, fmt.Errorf("host: Options.FusedLayer %d: want -1, 0, 1 or 2", o)
	}
	switch v := os.Getenv("FT_HOST_LAYER"); v {
	case "", "1":
		return layerPhased, nil
	case "0":
		return layerOff, nil
	case "jobs":
		return layerJobs, nil
	default:
		return 0, fmt.Errorf("host: FT_HOST_LAYER=%q: want 0 (separate ops), jobs (one op of five pool jobs) or 1 (one op, one pool job)", v)
	}
}

// DecodeLayerOn reports whether DecodeLayer may run: not at Level Generic
// (no fast kernels) and not switched off (FT_HOST_LAYER=0).
func (b *Backend) DecodeLayerOn() bool { return b.layerMode != layerOff && b.e.k != nil }

// DecodeLayer runs one token's plain decoder layer (kernels.DecodeLayer)
// as one pool job of five phases (decodePhased; FT_HOST_LAYER=jobs: five
// pool jobs, decodeJobs) — fused q/k/v, attention, o_proj adding into the
// residual, gate·up·SiLU, down_proj adding into the residual — with the
// norms, RoPE (cos/sin computed once per position and reused by every
// layer of the token) and the cache append between them. The values are
// those of the separate ops: the same GEMV tiles (same bits for each
// product), the reference RMSNorm and RoPE formulas, and the residual adds
// rounded once as kernels.MatMulAdder specifies. It declines (ran false)
// at Level Generic, with the op switched off (FT_HOST_LAYER=0), for
// weights other than BF16, F16 or F32, and for activations or caches
// other than F32.
func (b *Backend) DecodeLayer(a kernels.DecodeLayer) (bool, error) {
	if !b.DecodeLayerOn() {
		return false, nil
	}
	var ms [7]kernels.Mat
	for i, w := range []*runtime.Tensor{a.WQ, a.WK, a.WV, a.WO, a.WGate, a.WUp, a.WDown} {
		if w == nil {
			return false, fmt.Errorf("host.DecodeLayer: weight %d is nil", i)
		}
		if w.DType() != runtime.BF16 && w.DType() != runtime.F16 && w.DType() != runtime.F32 {
			return false, nil
		}
		m, err := kernels.AsMat(w)
		if err != nil {
			return false, err
		}
		ms[i] = m
	}
	acts := []*runtime.Tensor{a.X, a.H, a.Q, a.K, a.V, a.Att, a.Gate, a.KCache, a.VCache}
	for _, t := range acts {
		if t == nil || t.DType() != runtime.F32 {
			return false, nil
		}
	}
	vals := make([][]float32, len(acts))
	for i, t := range acts {
		v, err := f32s("DecodeLayer", "activation", t)
		if err != nil {
			return false, err
		}
		vals[i] = v
	}
	x, h, q, k, v, att, gate, kc, vc := vals[0], vals[1], vals[2], vals[3], vals[4], vals[5], vals[6], vals[7], vals[8]
	wq, wk, wv, wo, wg, wu, wd := ms[0], ms[1], ms[2], ms[3], ms[4], ms[5], ms[6]
	inN, err := kernels.AsMat(a.InNorm)
	if err != nil {
		return false, err
	}
	postN, err := kernels.AsMat(a.PostNorm)
	if err != nil {
		return false, err
	}
	D, I := len(x), wg.Rows
	qs, cs := a.Q.Shape(), a.KCache.Shape()
	if len(qs) != 3 || len(cs) != 3 || !a.VCache.Shape().Equal(cs) {
		return false, fmt.Errorf("host.DecodeLayer: q %v, caches %v / %v: want [1,H,d] and [C,KV,d]", qs, cs, a.VCache.Shape())
	}
	H, KV, d := qs[1], cs[1], qs[2]
	switch {
	case qs[0] != 1 || cs[2] != d || d%2 != 0 || len(a.InvFreq) != d/2:
		return false, fmt.Errorf("host.DecodeLayer: q %v, caches %v, %d frequencies: want one token, equal even head widths and d/2 frequencies", qs, cs, len(a.InvFreq))
	case len(h) != D || inN.Rows*inN.Cols != D || postN.Rows*postN.Cols != D:
		return false, fmt.Errorf("host.DecodeLayer: residual %d, h %d, norms %d and %d values: want equal widths", D, len(h), inN.Rows*inN.Cols, postN.Rows*postN.Cols)
	case wq.Cols != D || wk.Cols != D || wv.Cols != D || wq.Rows != H*d || wk.Rows != KV*d || wv.Rows != KV*d || len(k) != KV*d || len(v) != KV*d:
		return false, fmt.Errorf("host.DecodeLayer: q/k/v weights %dx%d, %dx%d, %dx%d for %d heads, %d KV heads of %d and width %d", wq.Rows, wq.Cols, wk.Rows, wk.Cols, wv.Rows, wv.Cols, H, KV, d, D)
	case wo.Rows != D || wo.Cols != H*d || len(att) != H*d:
		return false, fmt.Errorf("host.DecodeLayer: o weight %dx%d, want %dx%d", wo.Rows, wo.Cols, D, H*d)
	case wu.Rows != I || wu.Cols != D || wg.Cols != D || wd.Rows != D || wd.Cols != I || len(gate) != I:
		return false, fmt.Errorf("host.DecodeLayer: gate %dx%d, up %dx%d, down %dx%d, gate scratch %d: want I×%d, I×%d, %d×I", wg.Rows, wg.Cols, wu.Rows, wu.Cols, wd.Rows, wd.Cols, len(gate), D, D, D)
	case a.Pos < 0 || a.Pos >= cs[0]:
		return false, fmt.Errorf("host.DecodeLayer: position %d outside the cache's %d rows", a.Pos, cs[0])
	case a.Window < 0:
		return false, fmt.Errorf("host.DecodeLayer: sliding window %d is negative (0 means none)", a.Window)
	}

	if b.layerMode == layerJobs {
		return true, b.decodeJobs(a, x, h, q, k, v, att, gate, kc, vc, inN, postN, wq, wk, wv, wo, wg, wu, wd, H, KV, d)
	}
	return true, b.decodePhased(a, x, h, q, k, v, att, gate, kc, vc, inN, postN, wq, wk, wv, wo, wg, wu, wd, H, KV, d)
}

// stageClock adds each stage's wall time to a DecodeStages.
type stageClock struct {
	st *kernels.DecodeStages
	t0 time.Time
}

func newStageClock(st *kernels.DecodeStages) stageClock {
	if st == nil {
		return stageClock{}
	}
	return stageClock{st: st, t0: time.Now()}
}

func (c *stageClock) mark(s kernels.DecodeStage) {
	if c.st == nil {
		return
	}
	t := time.Now()
	c.st.Time[s] += t.Sub(c.t0)
	c.t0 = t
}

func (c *stageClock) step() {
	if c.st != nil {
		c.st.Steps++
	}
}

// ropeKV rotates q and k at a.Pos and appends k and v to the caches.
func (b *Backend) ropeKV(a *kernels.DecodeLayer, q, k, v, kc, vc []float32, H, KV, d int) {
	b.ropeMu.Lock()
	cos, sin := b.ropeTable(a.Pos, a.InvFreq)
	rotate(q, H, d, cos, sin)
	rotate(k, KV, d, cos, sin)
	b.ropeMu.Unlock()
	row := KV * d
	copy(kc[a.Pos*row:(a.Pos+1)*row], k)
	copy(vc[a.Pos*row:(a.Pos+1)*row], v)
}

// decodeJobs is DecodeLayer as five pool jobs (FT_HOST_LAYER=jobs) with
// the serial steps on the caller between them.
func (b *Backend) decodeJobs(a kernels.DecodeLayer, x, h, q, k, v, att, gate, kc, vc []float32, inN, postN, wq, wk, wv, wo, wg, wu, wd kernels.Mat, H, KV, d int) error {
	e := b.e
	D := len(x)
	clk := newStageClock(a.Stages)
	if err := kernels.RMSNorm(h, x, 1, inN, a.InEps); err != nil {
		return err
	}
	clk.mark(kernels.StageNorm)
	e.multi(h, 1, []segment{{w: fromMat(wq), out: q, ldo: wq.Rows}, {w: fromMat(wk), out: k, ldo: wk.Rows}, {w: fromMat(wv), out: v, ldo: wv.Rows}})
	clk.mark(kernels.StageQKV)
	b.ropeKV(&a, q, k, v, kc, vc, H, KV, d)
	clk.mark(kernels.StageRoPEKV)
	row := KV * d
	if err := e.Attention(att, q, kc[:(a.Pos+1)*row], vc[:(a.Pos+1)*row], 1, a.Pos, H, KV, d, a.Window); err != nil {
		return err
	}
	clk.mark(kernels.StageAttention)
	e.multi(att, 1, []segment{{w: fromMat(wo), out: x, ldo: D, acc: true}})
	clk.mark(kernels.StageO)
	if err := kernels.RMSNorm(h, x, 1, postN, a.PostEps); err != nil {
		return err
	}
	clk.mark(kernels.StagePostNorm)
	if err := e.GateUpSiLU(gate, h, 1, wg, wu); err != nil {
		return err
	}
	clk.mark(kernels.StageGateUp)
	e.multi(gate, 1, []segment{{w: fromMat(wd), out: x, ldo: D, acc: true}})
	clk.mark(kernels.StageDown)
	clk.step()
	return nil
}

// ropeTable returns the cos and sin of position pos times each frequency,
// as kernels.ApplyRoPE computes them, kept for the next layer of the same
// token. The caller holds ropeMu.
func (b *Backend) ropeTable(pos int, invFreq []float32) (cos, sin []float32) {
	r := &b.rope
	n := len(invFreq)
	if r.pos == pos && len(r.freq) == n && (n == 0 || &r.freq[0] == &invFreq[0]) {
		return r.cos, r.sin
	}
	r.pos, r.freq = pos, invFreq
	r.cos, r.sin = r.cos[:0], r.sin[:0]
	p := float32(pos)
	for _, f := range invFreq {
		th := float64(p * f)
		r.cos = append(r.cos, float32(math.Cos(th)))
		r.sin = append(r.sin, float32(math.Sin(th)))
	}
	return r.cos, r.sin
}

// ropeCache is the last position's rotary table (ropeTable).
type ropeCache struct {
	pos      int
	freq     []float32
	cos, sin []float32
}

// rotate applies the rotary embedding of the tables to heads heads of
// width d in x (the rotate-half layout of kernels.ApplyRoPE).
func rotate(x []float32, heads, d int, cos, sin []float32) {
	half := d / 2
	for hd := range heads {
		lo := x[hd*d : hd*d+half]
		hi := x[hd*d+half : (hd+1)*d]
		hi, c, s := hi[:len(lo)], cos[:len(lo)], sin[:len(lo)]
		for i := range lo {
			a, bb := lo[i], hi[i]
			lo[i] = a*c[i] - bb*s[i]
			hi[i] = bb*c[i] + a*s[i]
		}
	}
}
