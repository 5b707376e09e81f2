package cudabackend

import (
	"fmt"
	"os"
)

// This file has no build tag so that FT_GEMM's values are checked (and
// tested) in every build; gemm.go is the CUDA side.

// GEMMMode is how the backend runs its BF16 GEMMs (MatMul and MatMulAdd of
// more than one token, the dequantized FP8 prefill): FT_GEMM.
type GEMMMode int

const (
	// GEMMTuned (the default, FT_GEMM=lt) runs each shape by the fastest of
	// cublasGemmEx and up to 8 cuBLASLt algorithms, measured at its first
	// eager use (cuda.BLAS.GemmBF16Tuned).
	GEMMTuned GEMMMode = iota
	// GEMMCublas (FT_GEMM=cublas) runs every shape through cublasGemmEx
	// with cuBLAS's default algorithm, as before the tuning existed.
	GEMMCublas
	// GEMMTunedSustained (FT_GEMM=lt-sustained) is GEMMTuned measuring
	// each shape at the GPU's sustained clocks, the candidates timed in
	// turns (cuda.BLAS.TuneSustained): prefill 8,192's GEMMs run ~13%
	// slower in the forward than alone (s12b), and the fastest alone need
	// not be the fastest there. For A/B runs: measured slower at prefill
	// 8,192 (213.9, 212.6 ms against 206.6, 207.2) and 0.3–1.4% faster at
	// 64 × 512 packed (714.8 against 718.6, 726.9 against 737.5, 729.2
	// against 731.6 ms; s21a, s21b, H200), so not the default.
	GEMMTunedSustained
)

// String is the mode's FT_GEMM value.
func (m GEMMMode) String() string {
	switch m {
	case GEMMTuned:
		return "lt"
	case GEMMCublas:
		return "cublas"
	case GEMMTunedSustained:
		return "lt-sustained"
	}
	return fmt.Sprintf("GEMMMode(%d)", int(m))
}

// ParseGEMMMode reads an FT_GEMM value: "" or "lt" (tuned),
// "lt-sustained", "cublas".
func ParseGEMMMode(s string) (GEMMMode, error) {
	switch s {
	case "", "lt":
		return GEMMTuned, nil
	case "lt-sustained":
		return GEMMTunedSustained, nil
	case "cublas":
		return GEMMCublas, nil
	}
	return 0, fmt.Errorf("FT_GEMM=%q: want lt (tuned cuBLASLt, the default), lt-sustained or cublas", s)
}

// gemmModeFromEnv reads FT_GEMM.
func gemmModeFromEnv() (GEMMMode, error) { return ParseGEMMMode(os.Getenv("FT_GEMM")) }
