package cudabackend

import (
	"fmt"
	"os"
)

// MergedAllMode says at which token counts the backend asks for the merged
// GEMMs (kernels.MergedAllTokenser): beyond the decoder's default of
// 2..256 tokens, for gate/up alone or for q/k/v too.
type MergedAllMode int

const (
	// MergedSmall: the decoder's default range only (FT_MERGED_GEMM unset,
	// "1" or "0"; "0" turns the merged GEMMs off altogether).
	MergedSmall MergedAllMode = iota
	// MergedAllGateUp: gate/up merged at every token count, q/k/v in the
	// default range (FT_MERGED_GEMM=gateup).
	MergedAllGateUp
	// MergedAll: gate/up and q/k/v merged at every token count
	// (FT_MERGED_GEMM=all).
	MergedAll
	// MergedAllQKV: q/k/v merged at every token count, gate/up in the
	// default range (FT_MERGED_GEMM=qkv: gate/up merged measured slower at
	// 8,192 tokens; q/k/v's separate products, N 4,096 and 1,024, run
	// below the larger GEMMs' rate there, s20a). Measured slower at 8,192
	// (212.8, 211.3 ms against 206.6, 207.2) and the same at 64 × 512
	// (718.5 against 718.6; s21a, H200).
	MergedAllQKV
)

// mergedAllFromEnv reads FT_MERGED_GEMM's range.
func mergedAllFromEnv() (MergedAllMode, error) { return parseMergedAll(os.Getenv("FT_MERGED_GEMM")) }

// parseMergedAll is mergedAllFromEnv's parser: "", "0", "1", "gateup", "qkv", "all".
func parseMergedAll(s string) (MergedAllMode, error) {
	switch s {
	case "", "0", "1":
		return MergedSmall, nil
	case "gateup":
		return MergedAllGateUp, nil
	case "qkv":
		return MergedAllQKV, nil
	case "all":
		return MergedAll, nil
	}
	return 0, fmt.Errorf("FT_MERGED_GEMM=%q: want \"\", \"0\", \"1\", \"gateup\", \"qkv\" or \"all\"", s)
}

// mergesAll is MergesAllTokens for the mode: whether the merge of gate/up
// (gateUp) or of q/k/v is wanted at every token count.
func (m MergedAllMode) mergesAll(gateUp bool) bool {
	return m == MergedAll || m == MergedAllGateUp && gateUp || m == MergedAllQKV && !gateUp
}

// mergedSmallTokens is the decoder's default merged range's top
// (decoder.MergedMaxTokens): a call for more tokens comes only from
// MergedAllMode, and its scratch is taken only where memory is plentiful
// (mergedRoom).
const mergedSmallTokens = 256

// mergedRoom reports whether a merged scratch of need bytes (after the
// growth rule) may be taken for a large-token call when room bytes are
// left for the device: at most half of them, so the scratch never takes
// the memory a workspace or the offload engine will want next.
func mergedRoom(need, room int64) bool { return need > 0 && need <= room/2 }
