package kernels

// MergedAllTokenser is implemented by a backend whose merged GEMMs
// (MergedMatMuler, MergedGateUpSiLUer) should be offered at every token
// count, not only the few tokens a caller merges by default (the decoder:
// 2..MergedMaxTokens). It is an A/B switch: for a long prefill the separate
// GEMMs are already compute-bound, and the merge only changes the GEMM
// shape (one n = ΣN_i instead of several) and adds a column split. The
// merged op may still answer ran false (e.g. no memory for its scratch).
type MergedAllTokenser interface {
	// MergesAllTokens reports whether the merged GEMM of an attention's
	// q, k, v (gateUp false) or of an MLP's gate, up (gateUp true) is
	// wanted at any token count.
	MergesAllTokens(gateUp bool) bool
}
