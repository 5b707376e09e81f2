package host

import (
	"fmt"
	"math"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

var (
	_ kernels.PagedDecodeAttender   = (*Backend)(nil)
	_ kernels.VarlenPrefillAttender = (*Backend)(nil)
)

// PagedDecodeAttention is kernels.PagedDecodeAttender (one query a
// sequence over the paged KV pools: a batched decode step) on the SIMD
// tiles (pagedAttention).
func (b *Backend) PagedDecodeAttention(out, q, kPool, vPool *runtime.Tensor, kv kernels.PagedKV, window int) error {
	if q != nil && len(q.Shape()) > 0 && q.Dim(0) != len(kv.SeqLens) {
		return fmt.Errorf("host.PagedDecodeAttention: %d queries for %d sequences, want one each", q.Dim(0), len(kv.SeqLens))
	}
	starts := make([]int32, len(kv.SeqLens)+1)
	for i := range starts {
		starts[i] = int32(i)
	}
	return b.pagedAttention("PagedDecodeAttention", out, q, kPool, vPool, starts, kv, window, func() error {
		return b.CPUBackend.PagedDecodeAttention(out, q, kPool, vPool, kv, window)
	})
}

// VarlenPrefillAttention is kernels.VarlenPrefillAttender (each packed
// sequence's queries causally over its cached positions: a batch's
// prefills) on the SIMD tiles (pagedAttention).
func (b *Backend) VarlenPrefillAttention(out, q, kPool, vPool *runtime.Tensor, qStarts []int32, kv kernels.PagedKV, window int) error {
	return b.pagedAttention("VarlenPrefillAttention", out, q, kPool, vPool, qStarts, kv, window, func() error {
		return b.CPUBackend.VarlenPrefillAttention(out, q, kPool, vPool, qStarts, kv, window)
	})
}

// pagedAttention is what kernels.PagedAttention computes (queries q [T,H,d],
// sequence s in rows qStarts[s].. at its last positions, over the pools
// [P,K,d] through kv's block table), with one pool unit per (query row, KV
// head): the group's query heads share each K and V row read, the rows
// taken a block's run at a time into the SIMD tiles. ref, the embedded
// reference's op, runs instead on a CPU without the SIMD kernels and for
// operands other than F32. Results are within 1e-5 (relative to Σ|a·v|)
// of the reference's.
func (b *Backend) pagedAttention(op string, out, q, kPool, vPool *runtime.Tensor, qStarts []int32, kv kernels.PagedKV, window int, ref func() error) error {
	e := b.e
	if e.k == nil {
		return ref()
	}
	for _, t := range []*runtime.Tensor{out, q, kPool, vPool} {
		if t == nil || t.DType() != runtime.F32 || t.F32() == nil {
			return ref()
		}
	}
	qs, ps := q.Shape(), kPool.Shape()
	if len(qs) != 3 || len(ps) != 3 || !ps.Equal(vPool.Shape()) || qs[2] != ps[2] || !qs.Equal(out.Shape()) {
		return fmt.Errorf("host.%s: q %v, out %v, pools %v / %v: want [T,H,d] and [P,K,d]", op, qs, out.Shape(), ps, vPool.Shape())
	}
	T, H, K, d := qs[0], qs[1], ps[1], qs[2]
	switch {
	case H <= 0 || K <= 0 || d <= 0 || H%K != 0:
		return fmt.Errorf("host.%s: %d heads over %d KV heads of width %d: want positive sizes, heads a multiple of KV heads", op, H, K, d)
	case window < 0:
		return fmt.Errorf("host.%s: sliding window %d is negative (0 means none)", op, window)
	}
	maxLen, err := kv.Check(qStarts, ps[0])
	if err != nil {
		return fmt.Errorf("host.%s: %w", op, err)
	}
	if n := len(kv.SeqLens); int(qStarts[n]) != T {
		return fmt.Errorf("host.%s: the query starts cover %d rows, q has %d", op, qStarts[n], T)
	}
	if T == 0 {
		return nil
	}
	seq := make([]int32, T) // each query row's sequence
	for s := range len(kv.SeqLens) {
		for r := qStarts[s]; r < qStarts[s+1]; r++ {
			seq[r] = int32(s)
		}
	}
	j := &pagedJob{e: e, out: out.F32(), q: q.F32(), k: kPool.F32(), v: vPool.F32(), kv: kv, qStarts: qStarts, seq: seq,
		H: H, K: K, d: d, window: window, maxLen: maxLen}
	e.pool.Run(T*K, 1, j.run)
	return nil
}

// pagedJob is pagedAttention's checked operands.
type pagedJob struct {
	e               *Engine
	out, q, k, v    []float32
	kv              kernels.PagedKV
	qStarts, seq    []int32
	H, K, d, window int
	maxLen          int
}

// run computes the (query row, KV head) units [u0,u1): the scores of the
// group's query heads over the positions the row sees (up to its own, the
// last window of them), block run by block run, their softmax, then the
// weighted sum of the V rows the same way.
func (j *pagedJob) run(worker, u0, u1 int) {
	e, d, K := j.e, j.d, j.K
	G := j.H / K
	L := e.k.lanes
	stride := K * d
	B := j.kv.BlockSize
	scale := float32(1 / math.Sqrt(float64(d)))
	sc := e.pool.Scratch(worker, G*j.maxLen)
	for u := u0; u < u1; u++ {
		r, kvh := u/K, u%K
		s := int(j.seq[r])
		// The row's position is its sequence's length less the rows after it.
		n := int(j.kv.SeqLens[s]) - (int(j.qStarts[s+1]) - 1 - r)
		lo := 0
		if j.window > 0 {
			lo = max(0, n-j.window)
		}
		m := n - lo
		table := j.kv.BlockTable[s*j.kv.MaxBlocks:]
		h0 := r*j.H + kvh*G // the group's first query head row
		qg := j.q[h0*d : (h0+G)*d]
		// each calls fn(i, run, row) for the runs of positions lo..n−1 that
		// lie in one block: i their first index from lo, row their first pool row.
		each := func(fn func(i, run, row int)) {
			for p := lo; p < n; {
				off := p % B
				run := min(n-p, B-off)
				fn(p-lo, run, int(table[p/B])*B+off)
				p += run
			}
		}
		each(func(i, run, row int) {
			dense(e.pool.tile(worker), L, j.k, e.k.r4F32, e.k.t4F32, e.k.r2t4F32, f32Val, row*stride+kvh*d, stride, qg, G, d, sc[i:], m, 0, run, nil, scale, false)
		})
		for g := range G {
			sg := sc[g*m : (g+1)*m]
			_, sum := expShift(sg)
			inv := 1 / sum
			for i := range sg {
				sg[i] *= inv
			}
		}
		o := j.out[h0*d : (h0+G)*d]
		clear(o)
		each(func(i, run, row int) {
			e.axpyHeadsLd(o, d, j.v, sc[i:], m, run, G, row*stride+kvh*d, stride, d)
		})
	}
}
