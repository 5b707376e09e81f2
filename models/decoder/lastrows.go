package decoder

import (
	"os"
	"slices"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/kvcache"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// The last layer past its attention. A forward that returns the logits of
// some rows only — a batched forward each entry's last token, Forward
// without allLogits the last row — needs the last layer's output at those
// rows alone, and the cache keeps every layer's keys and values, which the
// last layer makes before its attention: the rest of that layer (the
// output projection, the post-attention norm, the MLP) and the final norm
// matter for those rows alone. So after the last layer's attention the
// forward takes them — the attention's output rows and the residual
// stream's — and runs the rest on N rows instead of T. For 64 prompts of
// 512 tokens that skips 32,704 of the 32,768 rows of a layer's o_proj and
// MLP, about 3% of the forward's GEMM work; for one prompt of 8,192 tokens
// 8,191 of 8,192. The rows' values are the same operations on the same
// inputs; only a backend whose products depend on how many rows they take
// (another GEMM for 64 rows than for 32,768, a GEMV for one) rounds them
// differently.

// In a batched forward the kept rows' attention goes alone too, where the
// backend has the batched RoPE + store and the paged decode attention: the
// layer makes every row's keys and values (the cache keeps them) but only
// the kept rows' queries, and attends each kept row over its sequence's
// positions as a decode step does (attendKept). That skips the rest of the
// layer's q projection and attention: for 64 × 512 another 1.1 × 10¹² FLOP
// of GEMM and 1/32 of the forward's attention.

// lastRows is a forward's last layer run past attention on the rows whose
// logits the forward returns. The layer reads it from the workspace
// (workspace.last), set while the last layer runs.
type lastRows struct {
	rows []int32            // the rows kept, gathered by g; nil: the last row, a view
	x    *runtime.Tensor    // [N,D] F32: those rows of the residual stream, the layer's output and the final norm's input
	g    kernels.MoEKernels // the row gather (nil with rows nil)
	// The kept rows' own attention (attendKept; rs nil: every row's): the
	// rows' positions, and their sequences' layout with this forward's
	// positions, row i's sequence i.
	rs        kernels.BatchRoPEStorer
	pd        kernels.PagedDecodeAttender
	positions []int32
	kv        kernels.PagedKV
}

// fullLastLayer reports whether forwards run their last layer on every row
// (FullLastLayer, or FT_LAST_LAYER=all).
func (m *Model) fullLastLayer() bool {
	return m.FullLastLayer || os.Getenv("FT_LAST_LAYER") == "all"
}

// lastRowsFor returns how the last layer of a batched forward over T rows
// goes on past attention with the rows last (entry i's last token), or nil
// where it runs on every row: rows are all the rows (decode steps only),
// the backend has no row gather, or the model asks for the full layer.
// Where the backend has the batched RoPE + store and the paged decode
// attention, the kept rows attend alone (attendKept; FT_LAST_LAYER=
// attend-all keeps every row's queries, for A/B runs).
func (m *Model) lastRowsFor(b kernels.Backend, w *workspace, bs *batchState, last []int) *lastRows {
	T := bs.starts[len(bs.starts)-1]
	if len(last) >= T || m.fullLastLayer() {
		return nil
	}
	g, ok := b.(kernels.MoEKernels)
	if !ok {
		return nil
	}
	lr := &lastRows{rows: make([]int32, len(last)), x: rows(w.xLast, len(last)), g: g}
	for i, v := range last {
		lr.rows[i] = int32(v)
	}
	rs, ok1 := b.(kernels.BatchRoPEStorer)
	pd, ok2 := b.(kernels.PagedDecodeAttender)
	if !ok1 || !ok2 || os.Getenv("FT_LAST_LAYER") == "attend-all" { // attend-all: every row's queries (A/B runs)
		return lr
	}
	seqs, news := make([]*kvcache.Seq, len(last)), make([]int, len(last))
	lr.positions = make([]int32, len(last))
	for i, r := range last {
		pi, _ := slices.BinarySearch(bs.starts, r+1) // the entry whose rows end at r: starts[pi] = r+1
		e := bs.packed[pi-1]
		seqs[i], news[i], lr.positions[i] = e.Seq, len(e.IDs), bs.positions[r]
	}
	lr.rs, lr.pd, lr.kv = rs, pd, bs.cache.Layout(seqs, news)
	return lr
}

// lastRowOf returns how the last layer of Forward over the rows x goes on
// past attention with x's last row alone, or nil where it runs on every
// row: one row, a sharded model (its shards' all-reduces), or the model
// asks for the full layer.
func (m *Model) lastRowOf(x *runtime.Tensor) *lastRows {
	if x.Dim(0) == 1 || m.tp != nil || m.fullLastLayer() {
		return nil
	}
	return &lastRows{x: lastRow(x)}
}

// gatherX copies the kept rows of the residual stream x[T,D] into lr.x
// (nothing for the last row: lr.x is a view of it).
func (lr *lastRows) gatherX(x *runtime.Tensor) error {
	if lr.g == nil {
		return nil
	}
	return lr.g.GatherRows(lr.x, x, lr.rows)
}

// attRows returns the kept rows of the attention's output att[T,H,d]: the
// last row's view, or the rows gathered into the first N rows of dst, a
// [≥N,H,d] scratch.
func (lr *lastRows) attRows(dst, att *runtime.Tensor) (*runtime.Tensor, error) {
	if lr.g == nil {
		return lastRow(att), nil
	}
	N, T := len(lr.rows), att.Dim(0)
	width := att.NumElements() / T
	src, err := att.Reshape(T, width)
	if err != nil {
		return nil, err
	}
	out := rows(dst, N)
	flat, err := out.Reshape(N, width)
	if err != nil {
		return nil, err
	}
	if err := lr.g.GatherRows(flat, src, lr.rows); err != nil {
		return nil, err
	}
	return out, nil
}

// attendKept is Attention.forwardBatch in a forward's last layer whose kept
// rows attend alone (lastRows.rs set): the keys and values of every row of
// h[T,D], rotated and stored as the full layer stores them; the queries of
// the kept rows alone (gathered from h into the workspace's sel, free until
// the final norm); their attention as one decode step each over their
// sequence's positions, this forward's included; and the output projection
// of those rows into out [N,D]. Row for row the same operations as the full
// layer's on the same inputs.
func (a *Attention) attendKept(b kernels.Backend, w *workspace, out, h *runtime.Tensor, bs *batchState, acc kernels.MatMulAdder) error {
	lr, T := w.last, h.Dim(0)
	N := len(lr.rows)
	m := a.Node().Tree().Root().(*Model)
	return nn.Call(a, func() error {
		k, v := rows(w.k, T), rows(w.v, T)
		if err := a.projectKV(b, h, k, v); err != nil {
			return err
		}
		hk := rows(w.sel, N)
		if err := lr.g.GatherRows(hk, h, lr.rows); err != nil {
			return err
		}
		q := rows(w.q, N)
		if err := a.Q.Forward(b, q, hk); err != nil {
			return err
		}
		if err := a.qkNorm(b, q, k); err != nil {
			return err
		}
		kp, vp := bs.kv.Pools(a.Layer)
		if err := lr.rs.RoPEStoreKVAt(nil, k, v, kp, vp, bs.positions, bs.slots, m.invFreq); err != nil {
			return err
		}
		if err := lr.rs.RoPEStoreKVAt(q, nil, nil, nil, nil, lr.positions, nil, m.invFreq); err != nil {
			return err
		}
		if err := a.scaleQ(b, q); err != nil {
			return err
		}
		att := rows(w.att, N)
		if err := lr.pd.PagedDecodeAttention(att, q, kp, vp, lr.kv, a.Window); err != nil {
			return err
		}
		return a.output(b, out, att, acc)
	})
}

// projectKV makes the keys and values of every row of h: one GEMM where
// the backend merges the two (kernels.MergedMatMuler: their weights lie
// back to back, as the offload engine's units pack them), else one each.
func (a *Attention) projectKV(b kernels.Backend, h, k, v *runtime.Tensor) error {
	if f, ok := b.(kernels.MergedMatMuler); ok && merges(b, h, false, a.K, a.V) {
		ran, err := f.MatMulMerged([]*runtime.Tensor{k, v}, h, []*runtime.Tensor{a.K.Weight.Tensor(), a.V.Weight.Tensor()})
		if err != nil {
			return err
		}
		if ran {
			if err := a.K.AddBias(b, k); err != nil {
				return err
			}
			return a.V.AddBias(b, v)
		}
	}
	if err := a.K.Forward(b, k, h); err != nil {
		return err
	}
	return a.V.Forward(b, v, h)
}
