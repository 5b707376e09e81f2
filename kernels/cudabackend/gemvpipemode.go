package cudabackend

import (
	"os"
	"slices"
)

// gemvPipeDepths are the FT_GEMV values that pick pipelined GEMVs, each
// the infix of its kernels' names (kernels/cuda/gemvpipe.cu).
var gemvPipeDepths = []string{"pipe", "pipe8"}

// gemvPipeFromEnv is the default of Backend.GEMVPipe: "pipe" or "pipe8"
// when FT_GEMV names one (the software-pipelined one-token GEMVs,
// gemvpipe.go), else "" (FT_GEMV's other values are read elsewhere). No
// build tag: the command line checks it in every build.
func gemvPipeFromEnv() string {
	if v := os.Getenv("FT_GEMV"); slices.Contains(gemvPipeDepths, v) {
		return v
	}
	return ""
}
