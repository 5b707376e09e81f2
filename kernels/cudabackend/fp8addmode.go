package cudabackend

import (
	"fmt"
	"os"
)

// The switch of the residual-adding one-token FP8 GEMV (fp8add.go). This
// file has no build tag so that its parser is tested in every build.

// noFP8AddFromEnv reads FT_FP8_ADD, the default of Backend.NoFP8Add: "" or
// "1" on (o_proj and down_proj with FP8 weights add into the residual
// stream in the GEMV), "0" off (the product into scratch, then a separate
// add: the path before the switch, for A/B runs).
func noFP8AddFromEnv() (bool, error) { return parseFP8Add(os.Getenv("FT_FP8_ADD")) }

// parseFP8Add is noFP8AddFromEnv's parser: true means off.
func parseFP8Add(s string) (bool, error) {
	switch s {
	case "", "1":
		return false, nil
	case "0":
		return true, nil
	}
	return false, fmt.Errorf("FT_FP8_ADD=%q: want \"\", \"0\" or \"1\"", s)
}
