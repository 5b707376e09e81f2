package decoder

import (
	"os"

	"github.com/flextensor-go/flextensor/kernels"
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

// lastRows is a forward's last layer run past attention on the rows whose
// logits the forward returns. The layer reads it from the workspace
// (workspace.last), set while the last layer runs.
type lastRows struct {
	rows []int32            // the rows kept, gathered by g; nil: the last row, a view
	x    *runtime.Tensor    // [N,D] F32: those rows of the residual stream, the layer's output and the final norm's input
	g    kernels.MoEKernels // the row gather (nil with rows nil)
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
func (m *Model) lastRowsFor(b kernels.Backend, w *workspace, T int, last []int) *lastRows {
	if len(last) >= T || m.fullLastLayer() {
		return nil
	}
	g, ok := b.(kernels.MoEKernels)
	if !ok {
		return nil
	}
	r := make([]int32, len(last))
	for i, v := range last {
		r[i] = int32(v)
	}
	return &lastRows{rows: r, x: rows(w.xLast, len(last)), g: g}
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
