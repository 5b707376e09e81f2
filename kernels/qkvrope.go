package kernels

import (
	"fmt"
	"slices"

	"github.com/flextensor-go/flextensor/runtime"
)

// QKVRoPE are the operands of a one-token decode step's attention input:
// the q, k and v projections of X, their biases (each may be nil), the
// rotary embedding of q and k at position Pos and the store of the rotated
// k and of v into row Pos of the layer's KV cache.
type QKVRoPE struct {
	Q, K, V        *runtime.Tensor // outputs: [1,H,d], [1,KV,d], [1,KV,d]
	X              *runtime.Tensor // the normalised input [1,D]
	WQ, WK, WV     *runtime.Tensor // [H·d,D], [KV·d,D], [KV·d,D]
	BQ, BK, BV     *runtime.Tensor // biases [H·d], [KV·d], [KV·d], or nil
	KCache, VCache *runtime.Tensor // [C,KV,d]
	Pos            int             // the token's position (the cache row written)
	InvFreq        []float32       // the d/2 rotary frequencies
}

// QKVRoPEStorer is implemented by backends that run a one-token step's
// q/k/v projections, biases, RoPE and KV-cache store as one op (the CUDA
// backend: the GEMV with the rest in its epilogue).
type QKVRoPEStorer interface {
	// ProjectRoPEStoreKV leaves in a.Q, a.K, a.V, a.KCache and a.VCache
	// the values of ProjectRoPEStoreKVRef (the same bits on a backend whose
	// fused op is exact). ran false: the backend declines these operands
	// (or has the fusion switched off) and did nothing; the caller runs
	// the separate ops.
	ProjectRoPEStoreKV(a QKVRoPE) (ran bool, err error)
}

// Check validates a's shapes: one token, q [1,H,d], k and v [1,KV,d],
// weights [H·d,D] and [KV·d,D] for x [1,D] (or [D]), biases of the
// projections' widths where set, caches [C,KV,d] with Pos < C, and d/2
// frequencies. It returns H, KV and d.
func (a QKVRoPE) Check() (H, KV, d int, err error) {
	for _, c := range []struct {
		n string
		t *runtime.Tensor
	}{{"q", a.Q}, {"k", a.K}, {"v", a.V}, {"x", a.X}, {"q weight", a.WQ}, {"k weight", a.WK}, {"v weight", a.WV},
		{"k cache", a.KCache}, {"v cache", a.VCache}} {
		if c.t == nil {
			return 0, 0, 0, fmt.Errorf("kernels.ProjectRoPEStoreKV: %s is nil", c.n)
		}
	}
	qs, ks, cs := a.Q.Shape(), a.K.Shape(), a.KCache.Shape()
	if len(qs) != 3 || len(ks) != 3 || qs[0] != 1 || ks[0] != 1 || qs[2] != ks[2] || !a.V.Shape().Equal(ks) || len(cs) != 3 ||
		!a.VCache.Shape().Equal(cs) || cs[1] != ks[1] || cs[2] != ks[2] {
		return 0, 0, 0, fmt.Errorf("kernels.ProjectRoPEStoreKV: q %v, k %v, v %v, caches %v / %v: want [1,H,d], [1,KV,d], [1,KV,d] and [C,KV,d]",
			qs, ks, a.V.Shape(), cs, a.VCache.Shape())
	}
	H, KV, d = qs[1], ks[1], qs[2]
	if d%2 != 0 || len(a.InvFreq) != d/2 {
		return 0, 0, 0, fmt.Errorf("kernels.ProjectRoPEStoreKV: head width %d with %d frequencies: want an even width and d/2 = %d frequencies", d, len(a.InvFreq), d/2)
	}
	D := a.X.Dim(-1)
	if a.X.NumElements() != D {
		return 0, 0, 0, fmt.Errorf("kernels.ProjectRoPEStoreKV: x %v, want one token [1,D]", a.X.Shape())
	}
	for _, c := range []struct {
		n    string
		w, b *runtime.Tensor
		N    int
	}{{"q", a.WQ, a.BQ, H * d}, {"k", a.WK, a.BK, KV * d}, {"v", a.WV, a.BV, KV * d}} {
		if ws := c.w.Shape(); len(ws) != 2 || ws[0] != c.N || ws[1] != D {
			return 0, 0, 0, fmt.Errorf("kernels.ProjectRoPEStoreKV: %s weight %v, want [%d,%d]", c.n, ws, c.N, D)
		}
		if c.b != nil && c.b.NumElements() != c.N {
			return 0, 0, 0, fmt.Errorf("kernels.ProjectRoPEStoreKV: %s bias %v, want %d values", c.n, c.b.Shape(), c.N)
		}
	}
	if a.Pos < 0 || a.Pos >= cs[0] {
		return 0, 0, 0, fmt.Errorf("kernels.ProjectRoPEStoreKV: position %d outside the cache's %d rows", a.Pos, cs[0])
	}
	return H, KV, d, nil
}

// ProjectRoPEStoreKVRef is ProjectRoPEStoreKV by b's separate ops: MatMul
// for each projection, AddBias for each bias, RoPE of q and k at Pos, and
// StoreKV of k and v at row Pos.
func ProjectRoPEStoreKVRef(b Backend, a QKVRoPE) error {
	if _, _, _, err := a.Check(); err != nil {
		return err
	}
	for _, p := range []struct{ out, w, bias *runtime.Tensor }{{a.Q, a.WQ, a.BQ}, {a.K, a.WK, a.BK}, {a.V, a.WV, a.BV}} {
		rows, err := p.out.Reshape(1, p.w.Dim(0))
		if err != nil {
			return err
		}
		if err := b.MatMul(rows, a.X, p.w); err != nil {
			return err
		}
		if p.bias != nil {
			if err := AddBias(b, rows, p.bias); err != nil {
				return err
			}
		}
	}
	return ropeStoreRef(b, a.Q, a.K, a.V, a.KCache, a.VCache, a.Pos, a.InvFreq)
}

// RoPEQK rotates q and then k in place from position pos with inverse
// frequencies inv, one backend RoPE op each: the unfused rotary step of an
// attention layer (the part of RoPEStorer's contract before the cache
// writes), for callers whose backend or cache has no fused op.
func RoPEQK(b Backend, q, k *runtime.Tensor, pos int, inv []float32) error {
	if err := b.RoPE(q, pos, inv); err != nil {
		return err
	}
	return b.RoPE(k, pos, inv)
}

// ropeStoreRef is the tail both references share: RoPE of q and k from
// position pos (RoPEQK), then k and v stored into their caches at rows pos
// on, one backend op each.
func ropeStoreRef(b Backend, q, k, v, kc, vc *runtime.Tensor, pos int, inv []float32) error {
	if err := RoPEQK(b, q, k, pos, inv); err != nil {
		return err
	}
	if err := b.StoreKV(kc, k, pos); err != nil {
		return err
	}
	return b.StoreKV(vc, v, pos)
}

// ProjectRoPEStoreKV is ProjectRoPEStoreKVRef on the CPU: it always runs.
func (b *CPUBackend) ProjectRoPEStoreKV(a QKVRoPE) (bool, error) {
	return true, ProjectRoPEStoreKVRef(b, a)
}

var _ QKVRoPEStorer = (*CPUBackend)(nil)

// QKVRoPERows are the operands of a many-row forward's attention input:
// the q, k and v projections of X (no biases), the rotary embedding of q
// and k and the store of the rotated k and of v into the layer's cache.
// Row t is at position Pos+t and lands in cache row Pos+t (a contiguous
// cache: Positions nil), or at Positions[t] and lands in row Slots[t] (the
// paged pool).
type QKVRoPERows struct {
	Q, K, V          *runtime.Tensor // outputs: [T,H,d], [T,KV,d], [T,KV,d] (or [T,H·d], [T,KV·d])
	X                *runtime.Tensor // the normalised input [T,D]
	WQ, WK, WV       *runtime.Tensor // [H·d,D], [KV·d,D], [KV·d,D]
	KCache, VCache   *runtime.Tensor // [C,KV,d]: the contiguous cache or the pool
	Pos              int             // the first row's position (Positions nil)
	Positions, Slots []int32         // each row's position and cache row, or nil
	InvFreq          []float32       // the d/2 rotary frequencies
}

// Check validates a's shapes (T rows of X, q of H heads and k, v of KV heads
// of d = 2·len(InvFreq) columns, weights [·,D], caches [C,KV,d], T
// positions and slots, each slot below C; or Pos+T at most C) and returns
// T, H, KV and d.
func (a QKVRoPERows) Check() (T, H, KV, d int, err error) {
	for _, c := range []struct {
		n string
		t *runtime.Tensor
	}{{"q", a.Q}, {"k", a.K}, {"v", a.V}, {"x", a.X}, {"q weight", a.WQ}, {"k weight", a.WK}, {"v weight", a.WV},
		{"k cache", a.KCache}, {"v cache", a.VCache}} {
		if c.t == nil {
			return 0, 0, 0, 0, fmt.Errorf("kernels.QKVRoPERows: no %s", c.n)
		}
	}
	d = 2 * len(a.InvFreq)
	D := a.X.Dim(-1)
	if d == 0 || D == 0 {
		return 0, 0, 0, 0, fmt.Errorf("kernels.QKVRoPERows: %d frequencies, x %v", len(a.InvFreq), a.X.Shape())
	}
	T = a.X.NumElements() / D
	H, KV = a.WQ.Dim(0)/d, a.WK.Dim(0)/d
	switch {
	case len(a.WQ.Shape()) != 2 || len(a.WK.Shape()) != 2 || len(a.WV.Shape()) != 2 || a.WQ.Dim(1) != D || a.WK.Dim(1) != D || a.WV.Dim(1) != D ||
		a.WQ.Dim(0) != H*d || a.WK.Dim(0) != KV*d || a.WV.Dim(0) != KV*d:
		return 0, 0, 0, 0, fmt.Errorf("kernels.QKVRoPERows: weights %v, %v, %v for x of %d columns and heads of %d", a.WQ.Shape(), a.WK.Shape(), a.WV.Shape(), D, d)
	case a.Q.NumElements() != T*H*d || a.K.NumElements() != T*KV*d || a.V.NumElements() != T*KV*d:
		return 0, 0, 0, 0, fmt.Errorf("kernels.QKVRoPERows: q %v, k %v, v %v for %d rows of %d and %d heads of %d", a.Q.Shape(), a.K.Shape(), a.V.Shape(), T, H, KV, d)
	case len(a.KCache.Shape()) != 3 || a.KCache.Dim(1) != KV || a.KCache.Dim(2) != d || !slices.Equal(a.KCache.Shape(), a.VCache.Shape()):
		return 0, 0, 0, 0, fmt.Errorf("kernels.QKVRoPERows: caches %v and %v, want [C,%d,%d] each", a.KCache.Shape(), a.VCache.Shape(), KV, d)
	case a.Positions == nil && a.Slots != nil || a.Positions != nil && (len(a.Positions) != T || len(a.Slots) != T):
		return 0, 0, 0, 0, fmt.Errorf("kernels.QKVRoPERows: %d positions and %d slots for %d rows", len(a.Positions), len(a.Slots), T)
	case a.Positions == nil && a.Pos < 0:
		return 0, 0, 0, 0, fmt.Errorf("kernels.QKVRoPERows: position %d", a.Pos)
	}
	C := a.KCache.Dim(0)
	if a.Positions == nil && a.Pos+T > C {
		return 0, 0, 0, 0, fmt.Errorf("kernels.QKVRoPERows: rows at positions %d..%d past the cache's %d rows", a.Pos, a.Pos+T-1, C)
	}
	for t := range a.Slots {
		if a.Positions[t] < 0 || a.Slots[t] < 0 || int(a.Slots[t]) >= C {
			return 0, 0, 0, 0, fmt.Errorf("kernels.QKVRoPERows: row %d at position %d into cache row %d of %d", t, a.Positions[t], a.Slots[t], C)
		}
	}
	return T, H, KV, d, nil
}

// QKVRoPERowsStorer is implemented by backends that run a many-row
// forward's q/k/v projections, RoPE and KV-cache store as one op (the CUDA
// backend on sm_90: one GEMM with the rest in its epilogue).
type QKVRoPERowsStorer interface {
	// ProjectRoPEStoreRows leaves in a.Q, a.K, a.V and the cache rows what
	// the projections, the RoPE of q and k and the cache store give (up to
	// the products' rounding: the fused op rotates them unrounded). ran
	// false: the backend declines these operands (or has the op switched
	// off) and did nothing; the caller runs the separate ops.
	ProjectRoPEStoreRows(a QKVRoPERows) (ran bool, err error)
}

// ProjectRoPEStoreRowsRef is what ProjectRoPEStoreRows computes, by b's
// separate ops: the three products, the rotation of q and k at their
// positions and the stores of k and v (b's BatchRoPEStorer at Slots, or
// StoreKV at rows Pos.. of a contiguous cache).
func ProjectRoPEStoreRowsRef(b Backend, a QKVRoPERows) error {
	if _, _, _, _, err := a.Check(); err != nil {
		return err
	}
	for _, p := range []struct{ out, w *runtime.Tensor }{{a.Q, a.WQ}, {a.K, a.WK}, {a.V, a.WV}} {
		if err := b.MatMul(p.out, a.X, p.w); err != nil {
			return err
		}
	}
	if a.Positions != nil {
		f, ok := b.(BatchRoPEStorer)
		if !ok {
			return fmt.Errorf("kernels.ProjectRoPEStoreRowsRef: the backend has no BatchRoPEStorer for the paged rows")
		}
		return f.RoPEStoreKVAt(a.Q, a.K, a.V, a.KCache, a.VCache, a.Positions, a.Slots, a.InvFreq)
	}
	if err := RoPEQK(b, a.Q, a.K, a.Pos, a.InvFreq); err != nil {
		return err
	}
	if err := b.StoreKV(a.KCache, a.K, a.Pos); err != nil {
		return err
	}
	return b.StoreKV(a.VCache, a.V, a.Pos)
}
