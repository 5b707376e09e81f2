package cudabackend

import (
	"fmt"
	"os"
)

// The fused-epilogue GEMMs' settings (gemmfused.go, cuda builds), here
// without a build tag so that the tests of the sm_90a extra files see
// them in every build.

// gemmFusedFile is the kernels' file in kernels/cuda/sm90a/extra, compiled
// as a module of its own on the first call.
const gemmFusedFile = "gemm_fused.cu"

// gemmFusedSmem is the kernels' dynamic shared memory (GS_SMEM: 1,024
// bytes of alignment and four stages of 48 KiB); gemmFusedSmemTMA adds
// the two consumers' 16 KiB output tiles (GS_SMEM_TMA).
const (
	gemmFusedSmem    = 1024 + 4*48*1024
	gemmFusedSmemTMA = gemmFusedSmem + 2*16*1024
)

// SwiGLUStore is how the fused gate/up GEMM's epilogue stores its outputs
// (Backend.SwiGLUStore; A/B runs of the same products).
type SwiGLUStore int

const (
	// SwiGLUStoreTMA writes each consumer's outputs into shared memory and
	// stores them by TMA (gemm_swiglu_tma_bf16; the default, FT_SWIGLU_GEMM
	// unset or 1, since the thirty-seventh session: 64 × 512 709.95,
	// 711.68 ms against 724.50, 725.16 from registers, interleaved, s37a).
	SwiGLUStoreTMA SwiGLUStore = iota
	// SwiGLUStoreRegs stores 4-byte pairs from the accumulator layout
	// (gemm_swiglu_bf16; FT_SWIGLU_GEMM=regs, and where the output is not
	// 16-byte aligned).
	SwiGLUStoreRegs
)

// String is the store's FT_SWIGLU_GEMM value.
func (s SwiGLUStore) String() string {
	if s == SwiGLUStoreRegs {
		return "regs"
	}
	return "tma"
}

// swigluStoreFromEnv is the default of Backend.SwiGLUStore.
func swigluStoreFromEnv() SwiGLUStore {
	if os.Getenv("FT_SWIGLU_GEMM") == "regs" {
		return SwiGLUStoreRegs
	}
	return SwiGLUStoreTMA
}

// fusedMinTokens is the fewest rows the fused GEMMs take: below a few row
// tiles a layer's tiles do not fill the device.
const fusedMinTokens = 256

// swigluGEMMFromEnv is the default of Backend.SwiGLUGEMM: on unless
// FT_SWIGLU_GEMM=0 (New rejects values other than "", "0", "1", "regs"
// and "tma": SwiGLUStore). On by default since s23b/s23c: prefill 8,192
// 212.59, 212.44 ms against 216.09, 215.79 off; 64 × 512 725.17–728.27
// against 733.14–743.72 (interleaved; bench/RESULTS.md).
func swigluGEMMFromEnv() bool { return os.Getenv("FT_SWIGLU_GEMM") != "0" }

// qkvGEMMFromEnv is the default of Backend.QKVGEMM: off unless
// FT_QKV_GEMM=1 (stores from registers; s23f: prefill 8,192 214.65–215.34
// ms against 213.37–213.66 off, 64 × 512 728.17–730.79 against
// 722.65–725.72; the kernel 549 TFLOP/s, its epilogue's stores exposed)
// or tma (QKVStoreTMA).
func qkvGEMMFromEnv() bool {
	v := os.Getenv("FT_QKV_GEMM")
	return v == "1" || v == "tma"
}

// qkvStoreTMAFromEnv is the default of Backend.QKVStoreTMA: FT_QKV_GEMM=tma.
func qkvStoreTMAFromEnv() bool { return os.Getenv("FT_QKV_GEMM") == "tma" }

// gemmFusedDefines is what goes ahead of the fused GEMMs' source for a
// tile-order group of group row tiles (Backend.FusedGroup): "" for 0, the
// file's own (16).
func gemmFusedDefines(group int) string {
	if group <= 0 {
		return ""
	}
	return fmt.Sprintf("#define GS_GM %d\n", group)
}
