package kernels

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// RoPEAttention are the operands of a one-token decode step's attention
// after its projections: the rotary embedding of q and k at position Pos,
// the store of the rotated k and of v into row Pos of the layer's KV
// cache, and the attention of the rotated q over the cache's rows 0..Pos
// (the last Window of them; 0: all).
type RoPEAttention struct {
	Out            *runtime.Tensor // output [1,H,d]
	Q, K, V        *runtime.Tensor // the projections, unrotated: [1,H,d], [1,KV,d], [1,KV,d]
	KCache, VCache *runtime.Tensor // [C,KV,d]
	Pos            int             // the token's position (the cache row written)
	InvFreq        []float32       // the d/2 rotary frequencies
	Window         int             // sliding window (0: none)
}

// RoPEAttender is implemented by backends that run a one-token step's
// RoPE, KV-cache store and attention as one op (the CUDA backend: the
// decode attention kernel rotates the query and the new key itself, so
// the step has no RoPE launch between the projection and the attention).
type RoPEAttender interface {
	// RoPEAttend leaves in a.Out, a.KCache and a.VCache the values of
	// RoPEAttendRef (the same bits on the CUDA backend); a.Q and a.K are
	// left rotated or as they were (the backend's choice: callers treat
	// them as spent). ran false: the backend declines these operands (or
	// has the fusion switched off) and did nothing; the caller runs the
	// separate ops.
	RoPEAttend(a RoPEAttention) (ran bool, err error)
}

// Check validates a's shapes: one token, q and out [1,H,d], k and v
// [1,KV,d] with H a multiple of KV, caches [C,KV,d] with 0 ≤ Pos < C, d/2
// frequencies of an even d, a window ≥ 0. It returns H, KV and d.
func (a RoPEAttention) Check() (H, KV, d int, err error) {
	for _, c := range []struct {
		n string
		t *runtime.Tensor
	}{{"out", a.Out}, {"q", a.Q}, {"k", a.K}, {"v", a.V}, {"k cache", a.KCache}, {"v cache", a.VCache}} {
		if c.t == nil {
			return 0, 0, 0, fmt.Errorf("kernels.RoPEAttend: %s is nil", c.n)
		}
	}
	qs, ks, cs := a.Q.Shape(), a.K.Shape(), a.KCache.Shape()
	if len(qs) != 3 || len(ks) != 3 || qs[0] != 1 || ks[0] != 1 || qs[2] != ks[2] || !a.V.Shape().Equal(ks) || !a.Out.Shape().Equal(qs) ||
		len(cs) != 3 || !a.VCache.Shape().Equal(cs) || cs[1] != ks[1] || cs[2] != ks[2] {
		return 0, 0, 0, fmt.Errorf("kernels.RoPEAttend: q %v, out %v, k %v, v %v, caches %v / %v: want [1,H,d], [1,H,d], [1,KV,d], [1,KV,d] and [C,KV,d]",
			qs, a.Out.Shape(), ks, a.V.Shape(), cs, a.VCache.Shape())
	}
	H, KV, d = qs[1], ks[1], qs[2]
	if KV == 0 || H%KV != 0 {
		return 0, 0, 0, fmt.Errorf("kernels.RoPEAttend: %d query heads are not a multiple of %d KV heads", H, KV)
	}
	if d%2 != 0 || len(a.InvFreq) != d/2 {
		return 0, 0, 0, fmt.Errorf("kernels.RoPEAttend: head width %d with %d frequencies: want an even width and d/2 = %d frequencies", d, len(a.InvFreq), d/2)
	}
	if a.Pos < 0 || a.Pos >= cs[0] {
		return 0, 0, 0, fmt.Errorf("kernels.RoPEAttend: position %d outside the cache's %d rows", a.Pos, cs[0])
	}
	if a.Window < 0 {
		return 0, 0, 0, fmt.Errorf("kernels.RoPEAttend: sliding window %d is negative (0 means none)", a.Window)
	}
	return H, KV, d, nil
}

// RoPEAttendRef is RoPEAttend by b's separate ops: RoPE of q and k at Pos
// (RoPEQK), StoreKV of k and v at row Pos, and the attention of q over
// rows 0..Pos (AttendWindow).
func RoPEAttendRef(b Backend, a RoPEAttention) error {
	if _, _, _, err := a.Check(); err != nil {
		return err
	}
	if err := ropeStoreRef(b, a.Q, a.K, a.V, a.KCache, a.VCache, a.Pos, a.InvFreq); err != nil {
		return err
	}
	return AttendWindow(b, a.Out, a.Q, a.KCache, a.VCache, a.Pos, a.Window)
}

// RoPEAttend is RoPEAttendRef on the CPU: it always runs.
func (b *CPUBackend) RoPEAttend(a RoPEAttention) (bool, error) {
	return true, RoPEAttendRef(b, a)
}

var _ RoPEAttender = (*CPUBackend)(nil)
