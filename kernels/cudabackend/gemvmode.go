package cudabackend

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// The one parser of FT_GEMV, the switch of the one-token BF16 GEMV kernels.
// This file has no build tag so that its tests run in every build and the
// command line can list the values (GEMVValues).

// gemvMode is what FT_GEMV sets on a new Backend: GEMVRowBlocks, GEMVPipe,
// GEMVBal and GEMVPersistQKV.
type gemvMode struct {
	RowBlocks  bool
	Pipe       string
	Bal        int
	PersistQKV bool
}

// GEMVValues are the values FT_GEMV takes: "" (unset: gemvMixed when
// gemvMixedDefault, else the pipelined GEMVs everywhere) first, then
// "mixed" (q/k/v on gemv.cu's gemv3_bf16, the rest pipelined), "persist"
// (gemv.cu's persistent GEMVs everywhere), "rowblocks" (the row-block
// kernels), the pipelined depths ("pipe": kernels/cuda/gemvpipe.cu's
// software-pipelined GEMVs everywhere), "bal" (their split-K twins with
// the split chosen per product) and "bal2", "bal4" (each row cut into that
// many segments).
func GEMVValues() []string {
	v := []string{"", gemvMixed, "persist", "rowblocks"}
	v = append(v, gemvPipeDepths...)
	v = append(v, "bal")
	for _, S := range gemvBalSplits {
		v = append(v, "bal"+strconv.Itoa(S))
	}
	return v
}

// parseGEMV is FT_GEMV's value s as a gemvMode:
//
//	"":          the pipelined GEMVs, q/k/v apart if gemvMixedDefault
//	"mixed":     the pipelined GEMVs, q/k/v on gemv.cu's gemv3_bf16
//	"pipe":      the pipelined GEMVs everywhere (a gemvPipeDepths entry)
//	"persist":   gemv.cu's kernels everywhere (GEMVPipe "")
//	"rowblocks": the row-block kernels (GEMVRowBlocks, GEMVPipe "")
//	"bal":       the split-K twins, the split per product (gemvBalAuto),
//	             the pipelined GEMVs where they do not apply
//	"bal<S>":    the same with S segments a row, S one of gemvBalSplits
//
// Anything else, a near miss or a split the kernels do not come in
// ("bal3"), is an error naming the variable and the values it takes.
func parseGEMV(s string) (gemvMode, error) {
	switch {
	case s == "":
		return gemvMode{Pipe: gemvPipeDefault, PersistQKV: gemvMixedDefault}, nil
	case s == gemvMixed:
		return gemvMode{Pipe: gemvPipeDefault, PersistQKV: true}, nil
	case s == "persist":
		return gemvMode{}, nil
	case s == "rowblocks":
		return gemvMode{RowBlocks: true}, nil
	case slices.Contains(gemvPipeDepths, s):
		return gemvMode{Pipe: s}, nil
	case s == "bal":
		return gemvMode{Pipe: gemvPipeDefault, Bal: gemvBalAuto}, nil
	}
	if v, ok := strings.CutPrefix(s, "bal"); ok {
		if S, err := strconv.Atoi(v); err == nil && strconv.Itoa(S) == v && slices.Contains(gemvBalSplits, S) {
			return gemvMode{Pipe: gemvPipeDefault, Bal: S}, nil
		}
	}
	return gemvMode{}, fmt.Errorf("FT_GEMV=%q: want one of %s (or unset)", s, quoteValues(GEMVValues()[1:]))
}

// gemvFromEnv reads FT_GEMV (parseGEMV).
func gemvFromEnv() (gemvMode, error) { return parseGEMV(os.Getenv("FT_GEMV")) }

// quoteValues is values quoted and joined by commas, for error messages.
func quoteValues(values []string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ", ")
}
