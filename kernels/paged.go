package kernels

import (
	"fmt"
	"math"

	"github.com/flextensor-go/flextensor/runtime"
)

// PagedKV says where the keys and values of a batch's sequences sit in a
// paged pool of [P, K, d] rows (P = blocks × BlockSize): position p of
// sequence s is pool row
//
//	BlockTable[s·MaxBlocks + p/BlockSize]·BlockSize + p%BlockSize.
//
// SeqLens[s] is the number of positions sequence s holds, this forward's
// new ones included.
type PagedKV struct {
	BlockSize  int     // positions per block
	MaxBlocks  int     // the block table's row stride
	BlockTable []int32 // [N, MaxBlocks], row s the blocks of sequence s in position order
	SeqLens    []int32 // [N]
}

// Check validates the layout for queries packed as qStarts (N+1 row starts
// of N = len(SeqLens) sequences) over a pool of poolRows rows: a positive
// block size and table stride, a table of N rows, each sequence holding at
// least its queries and at most MaxBlocks blocks, and every block it uses
// inside the pool. It returns the longest sequence. Backends check before
// any kernel reads through the table.
func (kv PagedKV) Check(qStarts []int32, poolRows int) (maxLen int, err error) {
	n := len(kv.SeqLens)
	if len(qStarts) != n+1 || qStarts[0] != 0 {
		return 0, fmt.Errorf("%d query starts for %d sequences, want %d starting at 0", len(qStarts), n, n+1)
	}
	if kv.BlockSize <= 0 || kv.MaxBlocks <= 0 || len(kv.BlockTable) != n*kv.MaxBlocks {
		return 0, fmt.Errorf("block size %d, %d blocks per sequence, table of %d for %d sequences", kv.BlockSize, kv.MaxBlocks, len(kv.BlockTable), n)
	}
	poolBlocks := poolRows / kv.BlockSize
	for s := range n {
		nq, L := int(qStarts[s+1])-int(qStarts[s]), int(kv.SeqLens[s])
		if nq < 0 || L < nq {
			return 0, fmt.Errorf("sequence %d has %d queries and %d positions", s, nq, L)
		}
		used := (L + kv.BlockSize - 1) / kv.BlockSize
		if used > kv.MaxBlocks {
			return 0, fmt.Errorf("sequence %d holds %d positions, more than %d blocks of %d", s, L, kv.MaxBlocks, kv.BlockSize)
		}
		for _, blk := range kv.BlockTable[s*kv.MaxBlocks : s*kv.MaxBlocks+used] {
			if blk < 0 || int(blk) >= poolBlocks {
				return 0, fmt.Errorf("sequence %d names block %d of a pool of %d", s, blk, poolBlocks)
			}
		}
		maxLen = max(maxLen, L)
	}
	return maxLen, nil
}

// PagedDecodeAttender is attention for decode steps over a paged cache: one
// query per sequence, q and out [N,H,d], query s at position SeqLens[s]−1
// of sequence s, attending to its positions max(0, SeqLens[s]−window)..
// SeqLens[s]−1 (window 0: all) read from kPool, vPool [P,K,d] through the
// block table:
//
//	out[s,h] = Σ_p softmax_p(q[s,h]·k_s[p]/√d) · v_s[p].
type PagedDecodeAttender interface {
	// PagedDecodeAttention attends each sequence's one query over its cached positions.
	PagedDecodeAttention(out, q, kPool, vPool *runtime.Tensor, kv PagedKV, window int) error
}

// VarlenPrefillAttender is causal attention of packed sequences (varlen
// prefill, chunked or not) over a paged cache: q and out are [T,H,d] with
// sequence s's n_s = QStarts[s+1]−QStarts[s] queries in rows
// QStarts[s]..QStarts[s+1]−1, at its last positions SeqLens[s]−n_s..
// SeqLens[s]−1 (earlier positions are a prefix cached by earlier forwards).
// The query at position P of sequence s attends to that sequence's
// positions max(0, P−window+1)..P (window 0: 0..P), read through the block
// table. QStarts has N+1 entries, QStarts[0] = 0 and QStarts[N] = T.
type VarlenPrefillAttender interface {
	// VarlenPrefillAttention attends each sequence's queries causally over its cached positions.
	VarlenPrefillAttention(out, q, kPool, vPool *runtime.Tensor, qStarts []int32, kv PagedKV, window int) error
}

// PagedAttention is the CPU reference of both paged attentions: causal GQA
// of packed queries q [T,H,d] (sequence s in rows qStarts[s]..qStarts[s+1]−1,
// at its last positions of kv.SeqLens[s]) over the pools kPool, vPool
// [P,nKV,d] through kv's block table, written to out [T,H,d]. The math per
// query is Attention's (float32, stable softmax), so a sequence gives the
// same values here as alone over a contiguous cache. Decode is qStarts =
// 0,1,…,N.
func PagedAttention(out, q, kPool, vPool []float32, qStarts []int32, kv PagedKV, nHeads, nKV, headDim, window int) error {
	if window < 0 {
		return fmt.Errorf("kernels.PagedAttention: sliding window %d is negative (0 means none)", window)
	}
	if nHeads <= 0 || nKV <= 0 || headDim <= 0 || nHeads%nKV != 0 {
		return fmt.Errorf("kernels.PagedAttention: nHeads %d, nKV %d, headDim %d: want positive sizes with nHeads a multiple of nKV", nHeads, nKV, headDim)
	}
	n := len(kv.SeqLens)
	if len(qStarts) != n+1 || qStarts[0] != 0 {
		return fmt.Errorf("kernels.PagedAttention: %d query starts for %d sequences, want %d starting at 0", len(qStarts), n, n+1)
	}
	T := int(qStarts[n])
	if want := T * nHeads * headDim; len(q) != want || len(out) != want {
		return fmt.Errorf("kernels.PagedAttention: q has %d and out %d values, want T·H·d = %d·%d·%d", len(q), len(out), T, nHeads, headDim)
	}
	row := nKV * headDim
	if len(kPool)%row != 0 || len(vPool) != len(kPool) {
		return fmt.Errorf("kernels.PagedAttention: pools hold %d (k) and %d (v) values, want equal multiples of nKV·d = %d", len(kPool), len(vPool), row)
	}
	maxCtx, err := kv.Check(qStarts, len(kPool)/row)
	if err != nil {
		return fmt.Errorf("kernels.PagedAttention: %w", err)
	}
	if T == 0 {
		return nil
	}
	seqOf := make([]int32, T) // the sequence of each query row
	for s := range n {
		for t := qStarts[s]; t < qStarts[s+1]; t++ {
			seqOf[t] = int32(s)
		}
	}
	a := &pagedArgs{out: out, q: q, k: kPool, v: vPool, qStarts: qStarts, kv: kv, seqOf: seqOf,
		nHeads: nHeads, nKV: nKV, headDim: headDim, window: window}
	units := T * nHeads
	grain := max(1, gemvGrain/(2*headDim*(maxCtx/2+1)))
	parallelFor(units, grain, func(_, lo, hi int) {
		bp := getF32(maxCtx)
		a.units(*bp, lo, hi)
		putF32(bp)
	})
	return nil
}

type pagedArgs struct {
	out, q, k, v         []float32
	qStarts              []int32
	kv                   PagedKV
	seqOf                []int32
	nHeads, nKV, headDim int
	window               int
}

// units computes output rows u in [u0,u1), u = t·nHeads + h.
func (a *pagedArgs) units(scores []float32, u0, u1 int) {
	d, group, stride, bs := a.headDim, a.nHeads/a.nKV, a.nKV*a.headDim, a.kv.BlockSize
	scale := float32(1 / math.Sqrt(float64(d)))
	for u := u0; u < u1; u++ {
		t, h := u/a.nHeads, u%a.nHeads
		s := int(a.seqOf[t])
		table := a.kv.BlockTable[s*a.kv.MaxBlocks:]
		P := int(a.kv.SeqLens[s]) - int(a.qStarts[s+1]) + t // this query's position
		kvOff := (h / group) * d
		qv := a.q[u*d : (u+1)*d]
		o := a.out[u*d : (u+1)*d]
		lo := 0
		if a.window > 0 {
			lo = max(0, P+1-a.window)
		}
		sc := scores[:P+1-lo] // sc[i] is position lo+i
		mx := float32(math.Inf(-1))
		for i := range sc {
			p := lo + i
			off := (int(table[p/bs])*bs+p%bs)*stride + kvOff
			sc[i] = dot(qv, a.k[off:off+d]) * scale
			mx = max(mx, sc[i])
		}
		var sum float32
		for i, x := range sc {
			e := float32(math.Exp(float64(x - mx)))
			sc[i] = e
			sum += e
		}
		clear(o)
		inv := 1 / sum
		for i, e := range sc {
			p := lo + i
			off := (int(table[p/bs])*bs+p%bs)*stride + kvOff
			axpy(o, a.v[off:off+d], e*inv)
		}
	}
}

// pagedTensors checks the shapes of a paged attention's tensors and returns
// their values.
func pagedTensors(op string, out, q, kPool, vPool *runtime.Tensor) (ov, qv, kv, vv []float32, nHeads, nKV, d int, err error) {
	if ov, err = f32(op+" out", out); err != nil {
		return
	}
	if qv, err = f32(op+" q", q); err != nil {
		return
	}
	if kv, err = f32(op+" k pool", kPool); err != nil {
		return
	}
	if vv, err = f32(op+" v pool", vPool); err != nil {
		return
	}
	qs, ps := q.Shape(), kPool.Shape()
	if len(qs) != 3 || len(ps) != 3 || !ps.Equal(vPool.Shape()) || qs[2] != ps[2] || !qs.Equal(out.Shape()) {
		err = fmt.Errorf("kernels.%s: q %v, out %v, pools %v / %v: want [T,H,d] and [P,K,d]", op, qs, out.Shape(), ps, vPool.Shape())
		return
	}
	return ov, qv, kv, vv, qs[1], ps[1], qs[2], nil
}

// PagedDecodeAttention is one query per sequence over the paged pools
// (PagedDecodeAttender).
func (b *CPUBackend) PagedDecodeAttention(out, q, kPool, vPool *runtime.Tensor, kv PagedKV, window int) error {
	ov, qv, kp, vp, H, K, d, err := pagedTensors("PagedDecodeAttention", out, q, kPool, vPool)
	if err != nil {
		return err
	}
	if q.Dim(0) != len(kv.SeqLens) {
		return fmt.Errorf("kernels.PagedDecodeAttention: %d queries for %d sequences, want one each", q.Dim(0), len(kv.SeqLens))
	}
	starts := make([]int32, len(kv.SeqLens)+1)
	for i := range starts {
		starts[i] = int32(i)
	}
	return PagedAttention(ov, qv, kp, vp, starts, kv, H, K, d, window)
}

// VarlenPrefillAttention is causal attention of packed sequences over the
// paged pools (VarlenPrefillAttender).
func (b *CPUBackend) VarlenPrefillAttention(out, q, kPool, vPool *runtime.Tensor, qStarts []int32, kv PagedKV, window int) error {
	ov, qv, kp, vp, H, K, d, err := pagedTensors("VarlenPrefillAttention", out, q, kPool, vPool)
	if err != nil {
		return err
	}
	return PagedAttention(ov, qv, kp, vp, qStarts, kv, H, K, d, window)
}

// BatchRoPEStorer rotates and stores a batch's packed tokens in one op:
// token t of q [T,H,d] and k [T,K,d] is rotated at position positions[t]
// (as RoPE rotates a token at that position), and the rotated k[t] and v[t]
// [T,K,d] are written to row slots[t] of the pools kPool and vPool [P,K,d].
// It is RoPE and StoreKV per token, for a batch whose tokens sit at
// unrelated positions and pool rows (decoder.ForwardBatch). Either half
// may be left out: q nil rotates and stores the keys and values alone; k,
// v and both pools nil (and slots unused) rotate q alone — a forward's
// last layer makes every row's keys and values but the queries of a few
// rows only (decoder's lastrows.go).
type BatchRoPEStorer interface {
	// RoPEStoreKVAt rotates each token at its position and stores its k and v at its slot.
	RoPEStoreKVAt(q, k, v, kPool, vPool *runtime.Tensor, positions, slots []int32, invFreq []float32) error
}

// CheckRoPEStoreAt validates RoPEStoreKVAt's arguments by shape: q [T,H,d]
// or nil, k and v [T,K,d], pools [P,K,d] (all four nil, or none; not with
// q nil too), T positions ≥ 0, T slots in [0,P) where there are pools, and
// d/2 frequencies. It returns T, H and K (0 for a half left out) and d.
func CheckRoPEStoreAt(q, k, v, kPool, vPool *runtime.Tensor, positions, slots []int32, invFreq []float32) (T, H, K, d int, err error) {
	kvs := []struct {
		n string
		t *runtime.Tensor
	}{{"k", k}, {"v", v}, {"k pool", kPool}, {"v pool", vPool}}
	nils := 0
	for _, c := range kvs {
		if c.t == nil {
			nils++
		}
	}
	switch {
	case nils == len(kvs) && q == nil:
		return 0, 0, 0, 0, fmt.Errorf("RoPEStoreKVAt: q, k, v and the pools are all nil")
	case nils != 0 && nils != len(kvs):
		for _, c := range kvs {
			if c.t == nil {
				return 0, 0, 0, 0, fmt.Errorf("RoPEStoreKVAt: %s is nil (k, v and the pools go together)", c.n)
			}
		}
	}
	shapes := func() error {
		return fmt.Errorf("RoPEStoreKVAt: q %s, k %s, v %s, pools %s / %s with %d frequencies: want [T,H,d], [T,K,d] and [P,K,d] with d/2 frequencies",
			shapeOrNil(q), shapeOrNil(k), shapeOrNil(v), shapeOrNil(kPool), shapeOrNil(vPool), len(invFreq))
	}
	T, d = -1, -1
	if q != nil {
		qs := q.Shape()
		if len(qs) != 3 {
			return 0, 0, 0, 0, shapes()
		}
		T, H, d = qs[0], qs[1], qs[2]
	}
	var P int
	if nils == 0 {
		ks, ps := k.Shape(), kPool.Shape()
		if len(ks) != 3 || len(ps) != 3 || !ks.Equal(v.Shape()) || !ps.Equal(vPool.Shape()) || ps[1] != ks[1] || ps[2] != ks[2] ||
			(T >= 0 && (ks[0] != T || ks[2] != d)) {
			return 0, 0, 0, 0, shapes()
		}
		T, K, d, P = ks[0], ks[1], ks[2], ps[0]
	}
	if d%2 != 0 || len(invFreq) != d/2 {
		return 0, 0, 0, 0, shapes()
	}
	if len(positions) != T || (nils == 0 && len(slots) != T) {
		return 0, 0, 0, 0, fmt.Errorf("RoPEStoreKVAt: %d positions and %d slots for %d tokens", len(positions), len(slots), T)
	}
	for t := range T {
		if positions[t] < 0 {
			return 0, 0, 0, 0, fmt.Errorf("RoPEStoreKVAt: token %d at position %d", t, positions[t])
		}
		if nils == 0 && (slots[t] < 0 || int(slots[t]) >= P) {
			return 0, 0, 0, 0, fmt.Errorf("RoPEStoreKVAt: token %d goes to pool row %d of %d", t, slots[t], P)
		}
	}
	return T, H, K, d, nil
}

// shapeOrNil is t's shape for an error message, or "nil".
func shapeOrNil(t *runtime.Tensor) string {
	if t == nil {
		return "nil"
	}
	return fmt.Sprint(t.Shape())
}

// RoPEStoreKVAt rotates each token at its own position and stores its key
// and value at its own pool row (BatchRoPEStorer): the values of RoPE and
// StoreKV token by token.
func (b *CPUBackend) RoPEStoreKVAt(q, k, v, kPool, vPool *runtime.Tensor, positions, slots []int32, invFreq []float32) error {
	T, H, K, d, err := CheckRoPEStoreAt(q, k, v, kPool, vPool, positions, slots, invFreq)
	if err != nil {
		return fmt.Errorf("kernels.%w", err)
	}
	vals := make([][]float32, 5)
	for i, c := range []*runtime.Tensor{q, k, v, kPool, vPool} {
		if c == nil { // a half left out (CheckRoPEStoreAt)
			continue
		}
		if vals[i], err = f32("RoPEStoreKVAt", c); err != nil {
			return err
		}
	}
	qv, kv, vv, kp, vp := vals[0], vals[1], vals[2], vals[3], vals[4]
	row := K * d
	grain := max(1, convGrain/((H+K)*d+8*d))
	rot := func(lo, hi int) {
		for t := lo; t < hi; t++ {
			// ropeTokens rotates token t at pos0+t: pos0 = positions[t]−t.
			p := int(positions[t]) - t
			if H > 0 {
				ropeTokens(qv, H, d, p, invFreq, t, t+1)
			}
			if K > 0 {
				ropeTokens(kv, K, d, p, invFreq, t, t+1)
				s := int(slots[t])
				copy(kp[s*row:(s+1)*row], kv[t*row:(t+1)*row])
				copy(vp[s*row:(s+1)*row], vv[t*row:(t+1)*row])
			}
		}
	}
	if !splits(T, grain) {
		rot(0, T)
		return nil
	}
	parallelFor(T, grain, func(_, lo, hi int) { rot(lo, hi) })
	return nil
}
