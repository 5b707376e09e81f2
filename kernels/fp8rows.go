package kernels

// FP8RowsFuser is implemented by a backend whose FP8MultiMatMuler and
// FP8GateUpSiLUer gain from taking x of several rows (a prefill), not only
// one token: the GPU's FP8 tensor-core path quantizes the shared
// activations once for q, k and v (and for gate and up) instead of once
// per projection. FusesFP8Rows reports whether that holds for rows tokens;
// where it does not, or a backend lacks the interface, callers run one
// MatMulFP8 per projection for several rows. The results are those of the
// per-projection calls either way.
type FP8RowsFuser interface {
	FP8MultiMatMuler
	FP8GateUpSiLUer
	// FusesFP8Rows reports whether the fused FP8 ops share one quantization of x at rows tokens.
	FusesFP8Rows(rows int) bool
}

// FusesFP8Rows reports whether b takes FP8MultiMatMuler and FP8GateUpSiLUer
// calls of rows tokens (always for one token; for more, when b is an
// FP8RowsFuser that says so).
func FusesFP8Rows(b Backend, rows int) bool {
	if rows == 1 {
		return true
	}
	f, ok := b.(FP8RowsFuser)
	return ok && f.FusesFP8Rows(rows)
}
