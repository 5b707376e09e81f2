package kernels

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// RoPEAttention are the operands of a one-token decode step's attention
// with the rotary embedding and the KV-cache store folded in: q and the new
// key k rotated at position Pos, the rotated key and v stored at row Pos of
// the caches, and Out the attention of the rotated q over rows 0..Pos (the
// last Window of them when Window > 0).
type RoPEAttention struct {
	Out            *runtime.Tensor // [1,H,d]
	Q              *runtime.Tensor // [1,H,d], before RoPE
	K, V           *runtime.Tensor // the new token's key (before RoPE) and value, [1,KV,d]
	KCache, VCache *runtime.Tensor // [C,KV,d]
	Pos            int             // the token's position (the cache row written)
	Window         int             // sliding window, 0 for none
	InvFreq        []float32       // the d/2 rotary frequencies
}

// RoPEAttender is implemented by backends that run a one-token step's
// RoPE, KV store and attention as one op (the CUDA backend: the decode
// attention kernel rotates q and the new key itself, FT_ROPE_ATTN=1).
type RoPEAttender interface {
	// RoPEAttends reports whether the fused op is switched on; off,
	// AttendRoPE always declines, and callers keep their usual path.
	RoPEAttends() bool
	// AttendRoPE leaves in a.Out, a.KCache and a.VCache the values of
	// AttendRoPERef (the same bits on a backend whose fused op is exact);
	// a.Q and a.K hold unspecified values afterwards (the reference rotates
	// them in place, a fused kernel may not). ran false: the backend
	// declines these operands and did nothing; the caller runs the
	// separate ops.
	AttendRoPE(a RoPEAttention) (ran bool, err error)
}

// Check validates a's shapes: one token, q and out [1,H,d], k and v
// [1,KV,d] with H a multiple of KV, caches [C,KV,d] with Pos < C, a
// window of at least 0 and d/2 frequencies of an even d. It returns H, KV,
// d and C.
func (a RoPEAttention) Check() (H, KV, d, C int, err error) {
	for _, c := range []struct {
		n string
		t *runtime.Tensor
	}{{"out", a.Out}, {"q", a.Q}, {"k", a.K}, {"v", a.V}, {"k cache", a.KCache}, {"v cache", a.VCache}} {
		if c.t == nil {
			return 0, 0, 0, 0, fmt.Errorf("kernels.AttendRoPE: %s is nil", c.n)
		}
	}
	qs, ks, cs := a.Q.Shape(), a.K.Shape(), a.KCache.Shape()
	if len(qs) != 3 || len(ks) != 3 || qs[0] != 1 || ks[0] != 1 || qs[2] != ks[2] || !a.Out.Shape().Equal(qs) || !a.V.Shape().Equal(ks) ||
		len(cs) != 3 || !a.VCache.Shape().Equal(cs) || cs[1] != ks[1] || cs[2] != ks[2] {
		return 0, 0, 0, 0, fmt.Errorf("kernels.AttendRoPE: out %v, q %v, k %v, v %v, caches %v / %v: want [1,H,d], [1,H,d], [1,KV,d], [1,KV,d] and [C,KV,d]",
			a.Out.Shape(), qs, ks, a.V.Shape(), cs, a.VCache.Shape())
	}
	H, KV, d, C = qs[1], ks[1], qs[2], cs[0]
	if KV == 0 || H%KV != 0 {
		return 0, 0, 0, 0, fmt.Errorf("kernels.AttendRoPE: %d query heads are not a multiple of %d KV heads", H, KV)
	}
	if d%2 != 0 || len(a.InvFreq) != d/2 {
		return 0, 0, 0, 0, fmt.Errorf("kernels.AttendRoPE: head width %d with %d frequencies: want an even width and d/2 = %d frequencies", d, len(a.InvFreq), d/2)
	}
	if a.Pos < 0 || a.Pos >= C {
		return 0, 0, 0, 0, fmt.Errorf("kernels.AttendRoPE: position %d outside the cache's %d rows", a.Pos, C)
	}
	if a.Window < 0 {
		return 0, 0, 0, 0, fmt.Errorf("kernels.AttendRoPE: sliding window %d is negative (0 means none)", a.Window)
	}
	return H, KV, d, C, nil
}

// AttendRoPERef is AttendRoPE by b's separate ops: RoPE of q and k at Pos
// (in place), StoreKV of k and v at row Pos, and AttendWindow.
func AttendRoPERef(b Backend, a RoPEAttention) error {
	if _, _, _, _, err := a.Check(); err != nil {
		return err
	}
	if err := b.RoPE(a.Q, a.Pos, a.InvFreq); err != nil {
		return err
	}
	if err := b.RoPE(a.K, a.Pos, a.InvFreq); err != nil {
		return err
	}
	if err := b.StoreKV(a.KCache, a.K, a.Pos); err != nil {
		return err
	}
	if err := b.StoreKV(a.VCache, a.V, a.Pos); err != nil {
		return err
	}
	return AttendWindow(b, a.Out, a.Q, a.KCache, a.VCache, a.Pos, a.Window)
}
