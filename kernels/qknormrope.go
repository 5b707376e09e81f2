package kernels

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// QKNormRoPE are the operands of the step after a Qwen3-style attention's
// q/k/v projections: the per-head RMSNorm of q and k (weights QNorm and
// KNorm over the head width d, one eps), the rotary embedding of both at
// positions Pos.., and the store of the rotated k and of v into rows
// Pos.. of the layer's KV cache.
type QKNormRoPE struct {
	Q, K, V        *runtime.Tensor // [T,H,d], [T,KV,d], [T,KV,d]; q and k are rewritten in place
	QNorm, KNorm   *runtime.Tensor // the norms' weights [d]
	Eps            float32         // the norms' epsilon
	KCache, VCache *runtime.Tensor // [C,KV,d]
	Pos            int             // the position of the first token (its cache row)
	InvFreq        []float32       // the d/2 rotary frequencies
}

// NormRoPEStorer is implemented by backends that run a step's per-head
// q/k RMSNorm, RoPE of q and k and KV-cache store as one op (the CUDA
// backend: one kernel where PairRMSNorm and RoPEStoreKV are two launches).
type NormRoPEStorer interface {
	// NormRoPEStoreKV leaves in a.Q, a.K, a.KCache and a.VCache the values
	// of NormRoPEStoreKVRef (the same bits on a backend whose fused op is
	// exact). ran false: the backend declines these operands (or has the
	// fusion switched off) and did nothing; the caller runs the separate
	// ops.
	NormRoPEStoreKV(a QKNormRoPE) (ran bool, err error)
}

// Check validates a's shapes: q [T,H,d], k and v [T,KV,d], norm weights of
// d values, caches [C,KV,d] with rows Pos..Pos+T−1 inside them, and d/2
// frequencies for an even d. It returns T, H, KV and d.
func (a QKNormRoPE) Check() (T, H, KV, d int, err error) {
	for _, c := range []struct {
		n string
		t *runtime.Tensor
	}{{"q", a.Q}, {"k", a.K}, {"v", a.V}, {"q norm weight", a.QNorm}, {"k norm weight", a.KNorm}, {"k cache", a.KCache}, {"v cache", a.VCache}} {
		if c.t == nil {
			return 0, 0, 0, 0, fmt.Errorf("kernels.NormRoPEStoreKV: %s is nil", c.n)
		}
	}
	qs, ks, cs := a.Q.Shape(), a.K.Shape(), a.KCache.Shape()
	if len(qs) != 3 || len(ks) != 3 || qs[0] != ks[0] || qs[2] != ks[2] || !a.V.Shape().Equal(ks) || len(cs) != 3 ||
		!a.VCache.Shape().Equal(cs) || cs[1] != ks[1] || cs[2] != ks[2] {
		return 0, 0, 0, 0, fmt.Errorf("kernels.NormRoPEStoreKV: q %v, k %v, v %v, caches %v / %v: want [T,H,d], [T,KV,d], [T,KV,d] and [C,KV,d]",
			qs, ks, a.V.Shape(), cs, a.VCache.Shape())
	}
	T, H, KV, d = qs[0], qs[1], ks[1], qs[2]
	if d%2 != 0 || len(a.InvFreq) != d/2 {
		return 0, 0, 0, 0, fmt.Errorf("kernels.NormRoPEStoreKV: head width %d with %d frequencies: want an even width and d/2 = %d frequencies", d, len(a.InvFreq), d/2)
	}
	if a.QNorm.NumElements() != d || a.KNorm.NumElements() != d {
		return 0, 0, 0, 0, fmt.Errorf("kernels.NormRoPEStoreKV: norm weights %v / %v, want %d values each (the head width)", a.QNorm.Shape(), a.KNorm.Shape(), d)
	}
	if a.Pos < 0 || a.Pos+T > cs[0] {
		return 0, 0, 0, 0, fmt.Errorf("kernels.NormRoPEStoreKV: %d tokens at position %d exceed the cache's %d rows", T, a.Pos, cs[0])
	}
	return T, H, KV, d, nil
}

// NormRoPEStoreKVRef is NormRoPEStoreKV by b's separate ops, as the
// decoder runs them without the fused op: RMSNorm of each q head with
// QNorm and of each k head with KNorm (in place, over the [T·H,d] and
// [T·KV,d] views), RoPE of q and k at Pos, StoreKV of k and v at row Pos.
func NormRoPEStoreKVRef(b Backend, a QKNormRoPE) error {
	T, H, KV, d, err := a.Check()
	if err != nil {
		return err
	}
	qh, err := a.Q.Reshape(T*H, d)
	if err != nil {
		return err
	}
	kh, err := a.K.Reshape(T*KV, d)
	if err != nil {
		return err
	}
	if err := b.RMSNorm(qh, qh, a.QNorm, a.Eps); err != nil {
		return err
	}
	if err := b.RMSNorm(kh, kh, a.KNorm, a.Eps); err != nil {
		return err
	}
	return ropeStoreRef(b, a.Q, a.K, a.V, a.KCache, a.VCache, a.Pos, a.InvFreq)
}

// NormRoPEStoreKV is NormRoPEStoreKVRef on the CPU: it always runs.
func (b *CPUBackend) NormRoPEStoreKV(a QKNormRoPE) (bool, error) {
	return true, NormRoPEStoreKVRef(b, a)
}

var _ NormRoPEStorer = (*CPUBackend)(nil)
