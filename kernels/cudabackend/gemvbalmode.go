package cudabackend

import (
	"os"
	"strconv"
	"strings"
)

// gemvBalSplits are the segment counts a row of the split-K GEMVs
// (gemvbal.go, kernels/cuda/gemvpipe_bal.cu) comes in: FT_GEMV=bal2 and
// bal4.
var gemvBalSplits = []int{2, 4}

// gemvBalAuto is Backend.GEMVBal's value for FT_GEMV=bal: the split chosen
// per product (gemvBalAutoSplit; 1 = whole rows, the pipelined kernels).
const gemvBalAuto = 1

// gemvBalFromEnv is the default of Backend.GEMVBal: S for FT_GEMV=bal<S>
// with S one of gemvBalSplits, gemvBalAuto for FT_GEMV=bal, else 0 (off). No build tag: the command
// line checks it in every build.
func gemvBalFromEnv() int {
	v, ok := strings.CutPrefix(os.Getenv("FT_GEMV"), "bal")
	if !ok {
		return 0
	}
	if v == "" {
		return gemvBalAuto
	}
	S, err := strconv.Atoi(v)
	if err != nil {
		return 0
	}
	for _, s := range gemvBalSplits {
		if s == S {
			return S
		}
	}
	return 0
}
