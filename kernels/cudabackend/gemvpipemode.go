package cudabackend

import (
	"os"
	"slices"
)

// gemvPipeDepths are the FT_GEMV values that pick pipelined GEMVs, each
// the infix of its kernels' names (kernels/cuda/gemvpipe.cu).
var gemvPipeDepths = []string{"pipe"}

// gemvPipeDefault is the depth without FT_GEMV. Measured on the H200
// (2026-12-01, Llama-3-8B resident decode at context 512, bench/RESULTS.md
// s7c/s7d): the graph step 4.23 and 4.24 ms against 4.34 and 4.31 for
// gemv.cu's kernels, run-model 4.18 and 4.20 ms a token against 4.25.
const gemvPipeDefault = "pipe"

// gemvPipeFromEnv is the default of Backend.GEMVPipe: the software-pipelined
// one-token GEMVs (gemvpipe.go) at depth "pipe" when FT_GEMV is unset or
// empty or "pipe" or "mixed" (gemvMixedFromEnv: q/k/v on gemv.cu's
// kernel, the rest pipelined), and under FT_GEMV=bal2/bal4 (gemvBalFromEnv: the
// split-K twins, with the pipelined kernels where they do not apply), else
// "" (FT_GEMV=persist: gemv.cu's kernels; rowblocks is read elsewhere). No build tag:
// the command line checks it in every build.
func gemvPipeFromEnv() string {
	v := os.Getenv("FT_GEMV")
	switch {
	case v == "", v == gemvMixed, gemvBalFromEnv() != 0:
		return gemvPipeDefault
	case slices.Contains(gemvPipeDepths, v):
		return v
	}
	return ""
}
