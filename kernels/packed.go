package kernels

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// PackedPrefillAttender is causal attention of packed sequences that all
// start at position 0 in this forward (nothing cached before: a batch of
// fresh prompts), reading each sequence's keys and values from the packed
// rows of this forward instead of a paged pool (the varlen layout with no
// block table): q and out are [T,H,d], k and v [T,K,d] (k already
// rotated), sequence s in rows QStarts[s]..QStarts[s+1]−1 at positions
// 0..n_s−1; the query at position P attends to its own sequence's rows at
// positions max(0, P−window+1)..P (window 0: 0..P). The same values as
// VarlenPrefillAttention over a pool holding those rows.
//
// PackedPrefillAttention reports false, having done nothing, where the
// backend does not take this call (switched off, no kernel for the head
// width, …); the caller then takes the paged path.
type PackedPrefillAttender interface {
	// PackedPrefillAttention attends the packed fresh sequences over their own rows, or reports false.
	PackedPrefillAttention(out, q, k, v *runtime.Tensor, qStarts []int32, window int) (bool, error)
}

// CheckPackedPrefill checks the arguments of PackedPrefillAttention for op
// (the caller's name, for errors) and returns the rows T, query heads H,
// KV heads K and head width d: out and q [T,H,d], k and v [T,K,d] with H a
// multiple of K, qStarts N+1 non-decreasing entries from 0 to T, window ≥ 0.
func CheckPackedPrefill(op string, out, q, k, v *runtime.Tensor, qStarts []int32, window int) (T, H, K, d int, err error) {
	if window < 0 {
		return 0, 0, 0, 0, fmt.Errorf("%s: sliding window %d is negative (0 means none)", op, window)
	}
	if out == nil || q == nil || k == nil || v == nil {
		return 0, 0, 0, 0, fmt.Errorf("%s: out, q, k and v are all required", op)
	}
	qs, ks := q.Shape(), k.Shape()
	if len(qs) != 3 || len(ks) != 3 || !out.Shape().Equal(qs) || !v.Shape().Equal(ks) || ks[0] != qs[0] || ks[2] != qs[2] {
		return 0, 0, 0, 0, fmt.Errorf("%s: q %v, out %v, k %v, v %v: want [T,H,d] and [T,K,d]", op, qs, out.Shape(), ks, v.Shape())
	}
	T, H, K, d = qs[0], qs[1], ks[1], qs[2]
	if H == 0 || d == 0 {
		return 0, 0, 0, 0, fmt.Errorf("%s: q %v: want at least one query head and a head width above 0", op, qs)
	}
	if K == 0 || H%K != 0 {
		return 0, 0, 0, 0, fmt.Errorf("%s: %d query heads for %d KV heads: want a multiple", op, H, K)
	}
	if len(qStarts) < 2 || qStarts[0] != 0 || int(qStarts[len(qStarts)-1]) != T {
		return 0, 0, 0, 0, fmt.Errorf("%s: query starts %v: want at least one sequence, from 0 to the %d rows", op, clip(qStarts), T)
	}
	for s := 1; s < len(qStarts); s++ {
		if qStarts[s] < qStarts[s-1] {
			return 0, 0, 0, 0, fmt.Errorf("%s: query starts decrease at sequence %d (%d after %d)", op, s-1, qStarts[s], qStarts[s-1])
		}
	}
	return T, H, K, d, nil
}

// clip is at most the first 8 entries of s, for error messages.
func clip(s []int32) []int32 {
	if len(s) > 8 {
		return s[:8]
	}
	return s
}

// PackedKV is the paged layout under which the packed rows of sequences
// starting at position 0 (sequence s in rows qStarts[s]..qStarts[s+1]−1)
// read as a pool: block size 1, sequence s's position p at row
// qStarts[s]+p. VarlenPrefillAttention with k and v [T,K,d] as the pools
// and this layout is what PackedPrefillAttention computes (its reference).
// qStarts must be non-decreasing from 0 (CheckPackedPrefill).
func PackedKV(qStarts []int32) PagedKV {
	n := max(0, len(qStarts)-1)
	kv := PagedKV{SeqLens: make([]int32, n), BlockSize: 1, MaxBlocks: 1}
	for s := range n {
		kv.SeqLens[s] = qStarts[s+1] - qStarts[s]
		kv.MaxBlocks = max(kv.MaxBlocks, int(kv.SeqLens[s]))
	}
	kv.BlockTable = make([]int32, n*kv.MaxBlocks)
	for s := range n {
		for p := range kv.SeqLens[s] {
			kv.BlockTable[s*kv.MaxBlocks+int(p)] = qStarts[s] + p
		}
	}
	return kv
}
