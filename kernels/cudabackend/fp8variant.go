package cudabackend

import (
	"fmt"
	"os"
)

// The tuning variants of the one-token FP8 GEMVs (kernels/cuda/fp8gemv.cu,
// fp8gemv.go). This file has no build tag so that the command line can
// check FT_FP8_VARIANT in every build.

// fp8Variant is one tuning of the FP8 GEMVs (fp8gemv.cu's FP8V_VARIANT):
// U 16-byte loads per lane and row in flight, R rows per warp at a time,
// x as fp32 in shared memory (SmemX) or bf16 from global memory.
type fp8Variant struct {
	Name  string
	U, R  int
	SmemX bool
}

// fp8Variants are the variants compiled into the module; FT_FP8_VARIANT
// picks one by name (default fp8DefaultVariant).
var fp8Variants = []fp8Variant{
	{"u4r1s", 4, 1, true}, {"u8r1s", 8, 1, true}, {"u16r1s", 16, 1, true},
	{"u4r2s", 4, 2, true}, {"u8r2s", 8, 2, true}, {"u16r2s", 16, 2, true},
	{"u4r1g", 4, 1, false}, {"u8r1g", 8, 1, false}, {"u16r1g", 16, 1, false},
	{"u4r2g", 4, 2, false}, {"u8r2g", 8, 2, false}, {"u16r2g", 16, 2, false},
	// Software-pipelined (kernels/cuda/fp8gemvpipe.cu): a warp issues its
	// next batch of 4 chunks (2 a matrix for gate·up) before computing the
	// current one, its first batch before x is staged; p4s stages x as
	// fp32 in shared memory, p4g reads it as bf16 from L1; p2r2s takes two
	// rows at a time (2 chunks each a batch) sharing each x read.
	{"p4s", 4, 1, true}, {"p4g", 4, 1, false}, {"p2r2s", 2, 2, true},
}

// fp8DefaultVariant is the FP8 GEMV tuning without FT_FP8_VARIANT: x
// widened to fp32 in shared memory, eight 16-byte loads per row in flight.
// Measured on the H200 (2026-12-01, Llama-3-8B FP8 resident decode at 512,
// graph replay): u8r1s 3.20 ms a step against 3.31 for u8r1g (x read as
// bf16 from global memory); the other variants were not swept for lack of
// device time (bench/h200-fp8sweep.sh compares them all).
const fp8DefaultVariant = "u8r1s"

// FP8VariantNames are the names FT_FP8_VARIANT takes, the default first.
func FP8VariantNames() []string {
	names := []string{fp8DefaultVariant}
	for _, v := range fp8Variants {
		if v.Name != fp8DefaultVariant {
			names = append(names, v.Name)
		}
	}
	return names
}

// fp8VariantFromEnv is the default of Backend.FP8Variant: FT_FP8_VARIANT,
// or fp8DefaultVariant when it is unset or empty.
func fp8VariantFromEnv() (string, error) {
	v := os.Getenv("FT_FP8_VARIANT")
	if v == "" {
		return fp8DefaultVariant, nil
	}
	for _, fv := range fp8Variants {
		if fv.Name == v {
			return v, nil
		}
	}
	return "", fmt.Errorf("FT_FP8_VARIANT=%q: want one of %v", v, FP8VariantNames())
}
