package cudabackend

import (
	"fmt"
	"os"
)

// The choice of normrows.go's many-rows RMSNorm kernels: pure logic, built
// without the cuda tag so that its tests run everywhere.

// NormRowsMode says when RMSNorm and AddRMSNorm of an F32 residual use the
// many-rows kernels.
type NormRowsMode int

const (
	// NormRowsAuto: for NormRowsMinRows rows or more (FT_NORM_ROWS unset).
	NormRowsAuto NormRowsMode = iota
	// NormRowsOff: never; norm.cu's one-block-per-row kernels (FT_NORM_ROWS=0).
	NormRowsOff
	// NormRowsAll: for every call of two rows or more (FT_NORM_ROWS=1).
	NormRowsAll
)

// NormRowsMinRows is the fewest rows for which NormRowsAuto takes the
// many-rows kernels: prefills and large batches; a decode step's one row
// (and a batched decode's few) keep norm.cu's kernels.
const NormRowsMinRows = 128

// normRowsFromEnv reads FT_NORM_ROWS: "" auto, "0" off, "1" all.
func normRowsFromEnv() (NormRowsMode, error) {
	return parseNormRows(os.Getenv("FT_NORM_ROWS"))
}

// parseNormRows is normRowsFromEnv's parser.
func parseNormRows(s string) (NormRowsMode, error) {
	switch s {
	case "":
		return NormRowsAuto, nil
	case "0":
		return NormRowsOff, nil
	case "1":
		return NormRowsAll, nil
	}
	return 0, fmt.Errorf("FT_NORM_ROWS=%q: want \"\", \"0\" or \"1\"", s)
}

// normF32Block is norm.cu's block size for an F32 row of dim values: the
// block size Backend.RMSNorm and AddRMSNorm launch rmsnorm_f32in_bf16 and
// add_rmsnorm_f32_bf16 at (rmsF32Threads, normgemv.go), whose sums the
// many-rows kernels reproduce.
func normF32Block(dim int) int { return min(1024, max(32, (dim/4+31)/32*32)) }

// normRowsShape returns, for rows of dim values, norm.cu's block size ot,
// the many-rows kernels' block size ot/4 and J (their index j = J-1); ok
// false where they do not apply: dim not a multiple of 4, ot not a multiple
// of 128 (rows shorter than 512 values, or not a multiple of 512 up to
// 4096), or more than 2·ot chunks (dim > 8192).
func normRowsShape(dim int) (ot, threads, j int, ok bool) {
	if dim <= 0 || dim%4 != 0 {
		return 0, 0, 0, false
	}
	ot = normF32Block(dim)
	if ot%128 != 0 {
		return 0, 0, 0, false
	}
	J := (dim/4 + ot - 1) / ot
	if J > 2 {
		return 0, 0, 0, false
	}
	return ot, ot / 4, J - 1, true
}

// normRows reports whether a norm of rows rows of dim values takes the
// many-rows kernels under mode, and their launch shape.
func normRows(mode NormRowsMode, rows, dim int) (ot, threads, j int, ok bool) {
	switch mode {
	case NormRowsOff:
		return 0, 0, 0, false
	case NormRowsAll:
		if rows < 2 {
			return 0, 0, 0, false
		}
	default:
		if rows < NormRowsMinRows {
			return 0, 0, 0, false
		}
	}
	return normRowsShape(dim)
}
