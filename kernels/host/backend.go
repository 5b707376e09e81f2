package host

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// Backend is a kernels.Backend for a CPU device that runs the hot ops of a
// decode step in this package's SIMD kernels on a persistent worker pool:
// MatMul (and the fused MultiMatMuler / GateUpSiLUer capabilities),
// MatMulFP8, SiLUMul and Attention (WindowAttender). Every other op, and
// every optional capability of the CPU backend (paged attention, bias,
// scale, batched RoPE+store), is the embedded reference CPUBackend's. At
// Level Generic it is the reference throughout.
type Backend struct {
	*kernels.CPUBackend
	e         *Engine
	layerMode int     // how DecodeLayer runs (Options.FusedLayer, FT_HOST_LAYER)
	gbps      float64 // FT_HOST_GBPS in bytes a second, 0 unset (hostgbps.go)

	ropeMu sync.Mutex
	rope   ropeCache // guarded by ropeMu

	dstate atomic.Pointer[decodeState] // an idle DecodeLayer state (decodestate.go)
}

var (
	_ kernels.Backend          = (*Backend)(nil)
	_ kernels.MultiMatMuler    = (*Backend)(nil)
	_ kernels.GateUpSiLUer     = (*Backend)(nil)
	_ kernels.FP8MatMuler      = (*Backend)(nil)
	_ kernels.FP8MultiMatMuler = (*Backend)(nil)
	_ kernels.FP8GateUpSiLUer  = (*Backend)(nil)
	_ kernels.WindowAttender   = (*Backend)(nil)
)

// New returns the host backend for dev (a CPU device) with o's threads and
// level. Close stops its workers.
func New(dev runtime.Device, o Options) (*Backend, error) {
	cb, err := kernels.NewCPUBackend(dev)
	if err != nil {
		return nil, fmt.Errorf("host: %w", err)
	}
	mode, err := layerModeFrom(o.FusedLayer)
	if err != nil {
		return nil, err
	}
	gbps, err := hostGBpsFromEnv()
	if err != nil {
		return nil, err
	}
	e, err := NewEngine(o)
	if err != nil {
		return nil, err
	}
	return &Backend{CPUBackend: cb, e: e, layerMode: mode, gbps: gbps, rope: ropeCache{pos: -1}}, nil
}

// Engine is the backend's kernel engine (its level, threads and pool).
func (b *Backend) Engine() *Engine { return b.e }

// Close stops the worker goroutines; the backend must not be used after.
func (b *Backend) Close() error {
	b.e.Close()
	return nil
}

func f32s(op, name string, t *runtime.Tensor) ([]float32, error) {
	if t.DType() != runtime.F32 {
		return nil, fmt.Errorf("host.%s: %s is %v, want F32 activations", op, name, t.DType())
	}
	v := t.F32()
	if v == nil && t.NumElements() > 0 {
		return nil, fmt.Errorf("host.%s: %s (%v) is not in host-addressable memory", op, name, t)
	}
	return v, nil
}

// tokens returns the rows of x and checks out's size: x [T,K], out [T,N].
func tokens(op string, out, x *runtime.Tensor, n, k int) (int, error) {
	if k == 0 || x.NumElements()%k != 0 {
		return 0, fmt.Errorf("host.%s: x %v does not have rows of the weight's %d columns", op, x.Shape(), k)
	}
	T := x.NumElements() / k
	if out.NumElements() != T*n {
		return 0, fmt.Errorf("host.%s: out %v, want %d×%d", op, out.Shape(), T, n)
	}
	return T, nil
}

// MatMul: out[T,N] = x[T,D]·w[N,D]ᵀ.
func (b *Backend) MatMul(out, x, w *runtime.Tensor) error {
	wm, err := kernels.AsMat(w)
	if err != nil {
		return err
	}
	xv, err := f32s("MatMul", "x", x)
	if err != nil {
		return err
	}
	ov, err := f32s("MatMul", "out", out)
	if err != nil {
		return err
	}
	T, err := tokens("MatMul", out, x, wm.Rows, wm.Cols)
	if err != nil {
		return err
	}
	return b.e.MatMul(ov, xv, T, wm)
}

// MatMulN: outs[i][T,N_i] = x[T,D]·ws[i][N_i,D]ᵀ in one pool job
// (MultiMatMuler; a token's q, k and v).
func (b *Backend) MatMulN(outs []*runtime.Tensor, x *runtime.Tensor, ws []*runtime.Tensor) error {
	if len(outs) != len(ws) {
		return fmt.Errorf("host.MatMulN: %d outputs for %d weights", len(outs), len(ws))
	}
	xv, err := f32s("MatMulN", "x", x)
	if err != nil {
		return err
	}
	if b.e.k == nil {
		for i := range ws {
			if err := b.MatMul(outs[i], x, ws[i]); err != nil {
				return err
			}
		}
		return nil
	}
	segs := make([]segment, len(ws))
	T := -1
	for i, w := range ws {
		wm, err := kernels.AsMat(w)
		if err != nil {
			return err
		}
		ov, err := f32s("MatMulN", "out", outs[i])
		if err != nil {
			return err
		}
		t, err := tokens("MatMulN", outs[i], x, wm.Rows, wm.Cols)
		if err != nil {
			return err
		}
		if T >= 0 && t != T {
			return fmt.Errorf("host.MatMulN: weight %d has %d columns, unlike weight 0's", i, wm.Cols)
		}
		T = t
		segs[i] = segment{w: fromMat(wm), out: ov, ldo: wm.Rows}
	}
	b.e.multi(xv, T, segs)
	return nil
}

// GateUpSiLU: out[1,I] = silu(x·wgᵀ)·(x·wuᵀ) (GateUpSiLUer).
func (b *Backend) GateUpSiLU(out, x, wg, wu *runtime.Tensor) error {
	gm, err := kernels.AsMat(wg)
	if err != nil {
		return err
	}
	um, err := kernels.AsMat(wu)
	if err != nil {
		return err
	}
	xv, err := f32s("GateUpSiLU", "x", x)
	if err != nil {
		return err
	}
	ov, err := f32s("GateUpSiLU", "out", out)
	if err != nil {
		return err
	}
	T, err := tokens("GateUpSiLU", out, x, gm.Rows, gm.Cols)
	if err != nil {
		return err
	}
	return b.e.GateUpSiLU(ov, xv, T, gm, um)
}

// GateUpSiLUFused: out[T,I] = silu(x·wgᵀ)·(x·wuᵀ) for several tokens as
// one AMX product with SiLU·up applied to its sums (FusedGateUpSiLUer);
// ran is false (nothing done) where the AMX products do not apply: no
// tiles, fewer than 16 tokens, weights not BF16 or of widths off 32.
func (b *Backend) GateUpSiLUFused(out, x, wg, wu *runtime.Tensor) (bool, error) {
	if b.e.amx == 0 {
		return false, nil
	}
	gm, err := kernels.AsMat(wg)
	if err != nil {
		return false, err
	}
	um, err := kernels.AsMat(wu)
	if err != nil {
		return false, err
	}
	if gm.Rows != um.Rows || gm.Cols != um.Cols {
		return false, fmt.Errorf("host.GateUpSiLUFused: gate %dx%d and up %dx%d differ", gm.Rows, gm.Cols, um.Rows, um.Cols)
	}
	xv, err := f32s("GateUpSiLUFused", "x", x)
	if err != nil {
		return false, err
	}
	ov, err := f32s("GateUpSiLUFused", "out", out)
	if err != nil {
		return false, err
	}
	T, err := tokens("GateUpSiLUFused", out, x, gm.Rows, gm.Cols)
	if err != nil {
		return false, err
	}
	return b.e.amxGateUp(ov, xv, T, gm, um), nil
}

// MatMulFP8: out[T,N] = x[T,D]·dequant(w, scale)ᵀ (FP8MatMuler). With
// FP8Activations set it is the reference's W8A8 emulation.
func (b *Backend) MatMulFP8(out, x, w, scale *runtime.Tensor, layout kernels.FP8Layout) error {
	if b.FP8Activations {
		return b.CPUBackend.MatMulFP8(out, x, w, scale, layout)
	}
	qm, err := kernels.AsQMat(w, scale, layout)
	if err != nil {
		return err
	}
	xv, err := f32s("MatMulFP8", "x", x)
	if err != nil {
		return err
	}
	ov, err := f32s("MatMulFP8", "out", out)
	if err != nil {
		return err
	}
	T, err := tokens("MatMulFP8", out, x, qm.Rows, qm.Cols)
	if err != nil {
		return err
	}
	return b.e.MatMulQ(ov, xv, T, qm)
}

// MatMulNFP8 is kernels.FP8MultiMatMuler by this backend's MatMulFP8, one
// product a weight: the embedded reference's would run the reference
// products (a promoted method calls the reference MatMulFP8, not this
// backend's).
func (b *Backend) MatMulNFP8(outs []*runtime.Tensor, x *runtime.Tensor, ws, scales []*runtime.Tensor, layout kernels.FP8Layout) error {
	return kernels.MatMulNFP8Each(b, outs, x, ws, scales, layout)
}

// GateUpSiLUFP8 is kernels.FP8GateUpSiLUer by this backend's kernels: gate
// into out, up into up, then SiLUMul (for the reason MatMulNFP8 gives).
func (b *Backend) GateUpSiLUFP8(out, up, x, wg, wu, sg, su *runtime.Tensor, layout kernels.FP8Layout) error {
	return kernels.GateUpSiLUFP8Apart(b, out, up, x, wg, wu, sg, su, layout)
}

// NewExpertTable gives a table that takes no weights
// (kernels.ErrNotFusable), so a mixture-of-experts block runs its experts
// one by one through this backend's threaded products instead of the
// embedded reference's fused expert ops, whose products run on one
// goroutine in the reference kernels.
func (b *Backend) NewExpertTable(experts int) (kernels.ExpertTable, error) {
	if experts <= 0 {
		return nil, fmt.Errorf("host.NewExpertTable: %d experts", experts)
	}
	return declinedExperts{}, nil
}

// declinedExperts is NewExpertTable's table.
type declinedExperts struct{}

// Set declines every set of experts.
func (declinedExperts) Set(gate, up, down []*runtime.Tensor) error {
	return fmt.Errorf("host: %w: the host backend runs experts one by one on its threaded products", kernels.ErrNotFusable)
}

// Close frees nothing.
func (declinedExperts) Close() error { return nil }

// SiLUMul: out = silu(gate)·up.
func (b *Backend) SiLUMul(out, gate, up *runtime.Tensor) error {
	ov, err := f32s("SiLUMul", "out", out)
	if err != nil {
		return err
	}
	gv, err := f32s("SiLUMul", "gate", gate)
	if err != nil {
		return err
	}
	uv, err := f32s("SiLUMul", "up", up)
	if err != nil {
		return err
	}
	return b.e.SiLUMul(ov, gv, uv)
}

// Attention runs causal GQA over the caches.
func (b *Backend) Attention(out, q, kCache, vCache *runtime.Tensor, pos0 int) error {
	return b.AttentionWindow(out, q, kCache, vCache, pos0, 0)
}

// AttentionWindow is Attention over the last window positions
// (WindowAttender; 0: all).
func (b *Backend) AttentionWindow(out, q, kCache, vCache *runtime.Tensor, pos0, window int) error {
	ov, err := f32s("Attention", "out", out)
	if err != nil {
		return err
	}
	qv, err := f32s("Attention", "q", q)
	if err != nil {
		return err
	}
	kv, err := f32s("Attention", "k cache", kCache)
	if err != nil {
		return err
	}
	vv, err := f32s("Attention", "v cache", vCache)
	if err != nil {
		return err
	}
	qs, cs := q.Shape(), kCache.Shape()
	if len(qs) != 3 || len(cs) != 3 || !cs.Equal(vCache.Shape()) || qs[2] != cs[2] {
		return fmt.Errorf("host.Attention: q %v, caches %v / %v: want [T,H,d] and [C,K,d]", qs, cs, vCache.Shape())
	}
	return b.e.Attention(ov, qv, kv, vv, qs[0], pos0, qs[1], cs[1], qs[2], window)
}

// MatMulAddNorm declines (kernels.MatMulAddNormer): the embedded reference
// would run its product on the reference kernels; declined, the decoder
// runs this backend's threaded MatMul, the add and RMSNorm apart.
func (b *Backend) MatMulAddNorm(y, x, w, out, nw *runtime.Tensor, eps float32) (bool, error) {
	return false, nil
}

// ProjectRoPEStoreKV declines (kernels.QKVRoPEStorer) for the same reason:
// the q/k/v products then run on this backend's MultiMatMul.
func (b *Backend) ProjectRoPEStoreKV(kernels.QKVRoPE) (bool, error) { return false, nil }

// NormRoPEStoreKV declines (kernels.NormRoPEStorer) likewise: the q/k
// norms, RoPE and KV store then run on this backend's own kernels.
func (b *Backend) NormRoPEStoreKV(kernels.QKNormRoPE) (bool, error) { return false, nil }
