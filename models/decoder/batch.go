package decoder

import (
	"errors"
	"fmt"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/kvcache"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// BatchEntry is one sequence's part of a batched forward: its new tokens,
// at positions Seq.Len()..Seq.Len()+len(IDs)−1. One token is a decode step;
// more are a prefill (a whole prompt or a chunk of one).
type BatchEntry struct {
	Seq *kvcache.Seq
	IDs []int32
}

// NewPagedCache allocates a paged KV cache shaped for the model (its
// layers, KV heads and head width) in b's activation dtype on b's device:
// blocks blocks of blockSize positions (0: kvcache.DefaultBlockSize).
// The cache is the caller's: close it (kvcache.Paged.Close) before the
// model's session, whose Close otherwise reports the device memory still
// held. After Stop or Close it returns an error wrapping ErrClosed.
func (m *Model) NewPagedCache(b kernels.Backend, blocks, blockSize int) (*kvcache.Paged, error) {
	if m == nil {
		return nil, errors.New("decoder.NewPagedCache: nil model")
	}
	if b == nil {
		return nil, errors.New("decoder.NewPagedCache: nil backend")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("decoder.NewPagedCache: %w", ErrClosed)
	}
	if m.tp != nil {
		return nil, errors.New("decoder: batched forwards (a paged KV cache) are not implemented for a sharded model; run one sequence at a time (Generate, Forward)")
	}
	return kvcache.New(b.Device(), b.ActDType(), m.PagedConfig(blocks, blockSize))
}

// PagedConfig is the paged-cache shape of the model with blocks blocks of
// blockSize positions (0: kvcache.DefaultBlockSize).
func (m *Model) PagedConfig(blocks, blockSize int) kvcache.Config {
	return kvcache.Config{Layers: len(m.Layers), KVHeads: m.Cfg.NumKeyValueHeads, HeadDim: m.Cfg.HeadDim,
		BlockSize: blockSize, Blocks: blocks}
}

// batchState is what the layers of one batched forward share: the entries
// in packed order (decode steps first, then prefills) and where each sits.
type batchState struct {
	cache    *kvcache.Paged
	kv       batchPools // the pools the layers read and write: the cache's, or its Mirror's on the host (hostbatch.go)
	packed   []BatchEntry
	starts   []int // packed[i]'s rows are starts[i]..starts[i+1]−1
	nDecode  int   // packed[:nDecode] are one-token entries
	decodeKV kernels.PagedKV
	prefKV   kernels.PagedKV
	prefQ    []int32 // query starts of the prefills, relative to row starts[nDecode]
	// prefFresh: every prefill starts at position 0 (nothing cached
	// before), so its keys and values are exactly its packed rows of this
	// forward (kernels.PackedPrefillAttender).
	prefFresh bool
	// positions and pool rows of the packed tokens, for
	// kernels.BatchRoPEStorer
	positions, slots []int32
	// scratch for backends without paged attention: contiguous keys and
	// values [maxCtx, K, d] that each sequence's are gathered into.
	kScratch, vScratch *runtime.Tensor
	maxCtx             int
}

func (bs *batchState) free() {
	for _, t := range []*runtime.Tensor{bs.kScratch, bs.vScratch} {
		if t != nil {
			t.Buffer().Free()
		}
	}
}

// ForwardBatch runs many sequences' new tokens in one pass through the
// model: every entry's tokens packed without padding as the rows of one
// [T_total, D] residual stream, so each layer (and each offloaded layer's
// weight stream) runs once for the whole batch; only attention and RoPE go
// per sequence, each sequence attending to its own cached positions
// through the paged cache (kernels.PagedDecodeAttender and
// kernels.VarlenPrefillAttender where the backend has them, else a gather
// into a contiguous copy and Backend.Attention).
//
// It reserves the blocks the new positions need (an error wrapping
// kvcache.ErrOutOfBlocks, before anything runs, when the pool is short),
// appends every layer's keys and values, commits the positions and returns
// the logits [N,V], row i those of entry i's last token. The returned
// tensor is the model's workspace: read it before the next forward. On an
// error no sequence's length changes. It holds the model's forward lock
// (see Model); another goroutine's forward may overwrite the returned
// logits once it returns, which ForwardBatchFunc avoids. After Stop or
// Close it returns an error wrapping ErrClosed and runs nothing.
func (m *Model) ForwardBatch(b kernels.Backend, cache *kvcache.Paged, entries []BatchEntry) (*runtime.Tensor, error) {
	if m == nil {
		return nil, errors.New("decoder.ForwardBatch: nil model")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.forwardBatch(b, cache, entries)
}

// ForwardBatchFunc is ForwardBatch followed by read of its logits, both
// under the model's forward lock, so that no other goroutine's forward
// overwrites the logits before read has used them. read must not call
// the model's forwards (the lock is not re-entrant); its error is
// returned, after the forward's positions were committed.
func (m *Model) ForwardBatchFunc(b kernels.Backend, cache *kvcache.Paged, entries []BatchEntry, read func(logits *runtime.Tensor) error) error {
	if m == nil {
		return errors.New("decoder.ForwardBatchFunc: nil model")
	}
	if read == nil {
		return errors.New("decoder.ForwardBatchFunc: nil read function")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	lt, err := m.forwardBatch(b, cache, entries)
	if err != nil {
		return err
	}
	return read(lt)
}

// forwardBatch is ForwardBatch with the forward lock held.
func (m *Model) forwardBatch(b kernels.Backend, cache *kvcache.Paged, entries []BatchEntry) (*runtime.Tensor, error) {
	if err := m.checkOpen("decoder.ForwardBatch"); err != nil {
		return nil, err
	}
	if m.tp != nil {
		return nil, errors.New("decoder.ForwardBatch: not implemented for a sharded model")
	}
	bs, ids, err := m.planBatch(b, cache, entries)
	if err != nil {
		return nil, err
	}
	defer bs.free()
	N, T := len(entries), len(ids)
	w, err := m.workspaceFor(b, T, N)
	if err != nil {
		return nil, err
	}
	// Row of entry i's last token.
	last := make([]int, N)
	for pi, e := range bs.packed {
		for i := range entries {
			if entries[i].Seq == e.Seq {
				last[i] = bs.starts[pi+1] - 1
			}
		}
	}
	var logits *runtime.Tensor
	m.passTokens, m.passAsks = T, !m.batchHostFree()
	err = nn.Call(m, func() error {
		x := rows(w.x, T) // the residual stream [T,D], all sequences packed
		if err := m.Embed.Forward(b, x, ids); err != nil {
			return err
		}
		kept, err := m.runBatchLayers(b, w, x, bs, last)
		if err != nil {
			return err
		}
		sel := rows(w.sel, N)
		if kept != nil { // the last layer's output is x's rows last already
			if err := m.Norm.Forward(b, sel, kept.x); err != nil {
				return err
			}
		} else {
			h := rows(w.h, T)
			if err := m.Norm.Forward(b, h, x); err != nil { // row-wise: the same values as on each last row alone
				return err
			}
			if err := gatherRows(b, sel, h, last); err != nil {
				return err
			}
		}
		logits = rows(w.logits, N)
		return m.Head.Forward(b, logits, sel)
	})
	if err != nil {
		return nil, err
	}
	for _, e := range bs.packed {
		if err := e.Seq.Commit(len(e.IDs)); err != nil {
			return nil, err
		}
	}
	return logits, nil
}

// planBatch checks the entries, reserves their blocks and packs them.
func (m *Model) planBatch(b kernels.Backend, cache *kvcache.Paged, entries []BatchEntry) (*batchState, []int32, error) {
	if len(entries) == 0 {
		return nil, nil, errors.New("decoder.ForwardBatch: an empty batch")
	}
	if cache == nil {
		return nil, nil, errors.New("decoder.ForwardBatch: no KV cache")
	}
	if got, want := cache.Config(), m.PagedConfig(0, cache.BlockSize()); got.Layers != want.Layers || got.KVHeads != want.KVHeads || got.HeadDim != want.HeadDim {
		return nil, nil, fmt.Errorf("decoder.ForwardBatch: the KV cache has %d layers of %d×%d, the model %d of %d×%d",
			got.Layers, got.KVHeads, got.HeadDim, want.Layers, want.KVHeads, want.HeadDim)
	}
	if k := cache.K[0]; k.DType() != b.ActDType() || k.Device() != b.Device() {
		return nil, nil, fmt.Errorf("decoder.ForwardBatch: the KV cache is %v on %s, the backend computes in %v on %s",
			k.DType(), k.Device().Name(), b.ActDType(), b.Device().Name())
	}
	seen := map[*kvcache.Seq]int{}
	for i, e := range entries {
		switch {
		case e.Seq == nil:
			return nil, nil, fmt.Errorf("decoder.ForwardBatch: entry %d has no sequence", i)
		case e.Seq.Cache() != cache || e.Seq.Freed():
			return nil, nil, fmt.Errorf("decoder.ForwardBatch: entry %d's sequence is not live in this cache", i)
		case len(e.IDs) == 0:
			return nil, nil, fmt.Errorf("decoder.ForwardBatch: entry %d has no tokens", i)
		}
		if j, ok := seen[e.Seq]; ok {
			return nil, nil, fmt.Errorf("decoder.ForwardBatch: entries %d and %d are the same sequence", j, i)
		}
		seen[e.Seq] = i
		for p, id := range e.IDs {
			if id < 0 || int(id) >= m.Cfg.VocabSize {
				return nil, nil, fmt.Errorf("decoder.ForwardBatch: entry %d: token id %d at position %d is outside the vocabulary [0, %d)", i, id, p, m.Cfg.VocabSize)
			}
		}
	}
	for i, e := range entries {
		if err := e.Seq.Reserve(len(e.IDs)); err != nil {
			return nil, nil, fmt.Errorf("decoder.ForwardBatch: entry %d (%d cached + %d new positions): %w", i, e.Seq.Len(), len(e.IDs), err)
		}
	}
	bs := &batchState{cache: cache, kv: cache}
	for _, e := range entries {
		if len(e.IDs) == 1 {
			bs.packed = append(bs.packed, e)
		}
	}
	bs.nDecode = len(bs.packed)
	for _, e := range entries {
		if len(e.IDs) > 1 {
			bs.packed = append(bs.packed, e)
		}
	}
	var ids []int32
	var seqs []*kvcache.Seq
	var news []int
	bs.starts = []int{0}
	for _, e := range bs.packed {
		ids = append(ids, e.IDs...)
		bs.starts = append(bs.starts, len(ids))
		seqs, news = append(seqs, e.Seq), append(news, len(e.IDs))
		bs.maxCtx = max(bs.maxCtx, e.Seq.Len()+len(e.IDs))
		for j := range e.IDs {
			p := e.Seq.Len() + j
			bs.positions, bs.slots = append(bs.positions, int32(p)), append(bs.slots, int32(e.Seq.Slot(p)))
		}
	}
	bs.decodeKV = cache.Layout(seqs[:bs.nDecode], news[:bs.nDecode])
	bs.prefKV = cache.Layout(seqs[bs.nDecode:], news[bs.nDecode:])
	base := bs.starts[bs.nDecode]
	for _, s := range bs.starts[bs.nDecode:] {
		bs.prefQ = append(bs.prefQ, int32(s-base))
	}
	bs.prefFresh = true
	for _, e := range bs.packed[bs.nDecode:] {
		if e.Seq.Len() != 0 {
			bs.prefFresh = false
		}
	}
	return bs, ids, nil
}

// gatherRows copies rows src[from[i]] to dst[i] in one op: a row gather is
// an embedding lookup with src as the table (one launch on a GPU, where
// row-by-row StoreKV copies took one launch per sequence).
func gatherRows(b kernels.Backend, dst, src *runtime.Tensor, from []int) error {
	ids := make([]int32, len(from))
	for i, r := range from {
		ids[i] = int32(r)
	}
	return b.Embedding(dst, src, ids)
}

// forwardBatch is Forward over a batch's packed rows h[T,D]: the
// projections, norms, RoPE and cache stores over all rows at once
// (projectRoPEBatch); attention as attendBatch; the output projection.
func (a *Attention) forwardBatch(b kernels.Backend, w *workspace, out, h *runtime.Tensor, bs *batchState, acc kernels.MatMulAdder) error {
	if w.last != nil && w.last.rs != nil {
		return a.attendKept(b, w, out, h, bs, acc) // a forward's last layer: the rows whose logits it returns attend alone (lastrows.go)
	}
	T := h.Dim(0)
	m := a.Node().Tree().Root().(*Model)
	return nn.Call(a, func() error {
		q, k, v := rows(w.q, T), rows(w.k, T), rows(w.v, T) // [T,H,d], [T,K,d], [T,K,d]
		if err := a.projectRoPEBatch(b, m.invFreq, h, q, k, v, bs); err != nil {
			return err
		}
		if err := a.scaleQ(b, q); err != nil {
			return err
		}
		att := rows(w.att, T) // [T,H,d]
		if err := a.attendBatch(b, att, q, k, v, bs); err != nil {
			return err
		}
		if w.last != nil { // the forward's last layer: the rows whose logits it returns go on (into q's rows, free now)
			var err error
			if att, err = w.last.attRows(w.q, att); err != nil {
				return err
			}
		}
		return a.output(b, out, att, acc)
	})
}

// projectRoPEBatch computes q, k and v of the packed rows h, rotates q
// and k and stores k and v at the rows' pool slots: one op where the
// backend fuses it for many rows (projectRoPERows), else the projections,
// the q/k norms and the RoPE + store (one op where the backend has
// kernels.BatchRoPEStorer, else per sequence).
func (a *Attention) projectRoPEBatch(b kernels.Backend, invFreq []float32, h, q, k, v *runtime.Tensor, bs *batchState) error {
	in := normed{h: h}
	kp, vp := bs.kv.Pools(a.Layer)
	if ran, err := a.projectRoPERows(b, invFreq, in, q, k, v, kp, vp, 0, bs.positions, bs.slots); err != nil || ran {
		return err
	}
	if err := a.project(b, in, q, k, v); err != nil {
		return err
	}
	if err := a.qkNorm(b, q, k); err != nil {
		return err
	}
	if f, ok := b.(kernels.BatchRoPEStorer); ok {
		return f.RoPEStoreKVAt(q, k, v, kp, vp, bs.positions, bs.slots, invFreq)
	}
	for i, e := range bs.packed {
		lo, hi := bs.starts[i], bs.starts[i+1]
		qi, ki, vi := slice(q, lo, hi), slice(k, lo, hi), slice(v, lo, hi)
		if err := kernels.RoPEQK(b, qi, ki, e.Seq.Len(), invFreq); err != nil {
			return err
		}
		if err := bs.kv.Store(b, a.Layer, e.Seq, ki, vi); err != nil {
			return err
		}
	}
	return nil
}

// attendBatch writes att[T,H,d] from q over each sequence's positions: the
// decode rows with one paged decode attention; the prefill rows, where all
// start at position 0, with one packed prefill attention over their own
// rows of k and v [T,K,d] (rotated; the pool holds copies) if the backend
// takes it, else with one varlen prefill attention over the pool; or
// sequence by sequence over gathered copies where the backend has neither.
func (a *Attention) attendBatch(b kernels.Backend, att, q, k, v *runtime.Tensor, bs *batchState) error {
	kp, vp := bs.kv.Pools(a.Layer)
	nd, T := bs.starts[bs.nDecode], q.Dim(0)
	done := make([]bool, len(bs.packed))
	if f, ok := b.(kernels.PagedDecodeAttender); ok && nd > 0 {
		if err := f.PagedDecodeAttention(slice(att, 0, nd), slice(q, 0, nd), kp, vp, bs.decodeKV, a.Window); err != nil {
			return err
		}
		for i := range bs.nDecode {
			done[i] = true
		}
	}
	packed := false
	if f, ok := b.(kernels.PackedPrefillAttender); ok && nd < T && bs.prefFresh && k.DType() == kp.DType() {
		ran, err := f.PackedPrefillAttention(slice(att, nd, T), slice(q, nd, T), slice(k, nd, T), slice(v, nd, T), bs.prefQ, a.Window)
		if err != nil {
			return err
		}
		packed = ran
	}
	if packed {
		for i := bs.nDecode; i < len(bs.packed); i++ {
			done[i] = true
		}
	} else if f, ok := b.(kernels.VarlenPrefillAttender); ok && nd < T {
		if err := f.VarlenPrefillAttention(slice(att, nd, T), slice(q, nd, T), kp, vp, bs.prefQ, bs.prefKV, a.Window); err != nil {
			return err
		}
		for i := bs.nDecode; i < len(bs.packed); i++ {
			done[i] = true
		}
	}
	for i, e := range bs.packed {
		if done[i] {
			continue
		}
		if bs.kScratch == nil {
			var err error
			shape := runtime.Shape{bs.maxCtx, kp.Dim(1), kp.Dim(2)}
			if bs.kScratch, err = runtime.NewTensor(b.Device(), kp.DType(), shape, "batch attention keys"); err != nil {
				return err
			}
			if bs.vScratch, err = runtime.NewTensor(b.Device(), kp.DType(), shape, "batch attention values"); err != nil {
				return err
			}
		}
		lo, hi := bs.starts[i], bs.starts[i+1]
		ctx := e.Seq.Len() + hi - lo
		if err := bs.kv.Gather(b, a.Layer, e.Seq, ctx, bs.kScratch, bs.vScratch); err != nil {
			return err
		}
		if err := kernels.AttendWindow(b, slice(att, lo, hi), slice(q, lo, hi), bs.kScratch, bs.vScratch, e.Seq.Len(), a.Window); err != nil {
			return err
		}
	}
	return nil
}

// slice is rows lo..hi−1 of t as a view.
func slice(t *runtime.Tensor, lo, hi int) *runtime.Tensor {
	v, err := t.Slice(lo, hi)
	if err != nil {
		panic(err) // the batch's row ranges lie within the workspace
	}
	return v
}
