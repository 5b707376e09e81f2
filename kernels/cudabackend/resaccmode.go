package cudabackend

import (
	"fmt"
	"os"
)

// ResidualViaNormMinTokens is the fewest tokens for which
// FT_PREFILL_RESACC=1 moves the attention residual add out of the output
// projection's GEMM into the post-attention norm (kernels.ResidualNormer).
const ResidualViaNormMinTokens = 256

// resAccFromEnv reads FT_PREFILL_RESACC: "" or "0" off (the GEMM
// accumulates into the residual), "1" on from ResidualViaNormMinTokens.
func resAccFromEnv() (bool, error) { return parseResAcc(os.Getenv("FT_PREFILL_RESACC")) }

// parseResAcc is resAccFromEnv's parser.
func parseResAcc(s string) (bool, error) {
	switch s {
	case "", "0":
		return false, nil
	case "1":
		return true, nil
	}
	return false, fmt.Errorf("FT_PREFILL_RESACC=%q: want \"\", \"0\" or \"1\"", s)
}
