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
// FT_QKV_GEMM=1. Its first epilogue, storing from registers, was slower
// (s23f: 64 × 512 728.17–730.79 ms against 722.65–725.72 off; the kernel
// 549 TFLOP/s); storing through shared memory and TMA as now, the kernel
// takes 85.8 ms of the step against ~87 for the three GEMMs and the RoPE
// kernel, the step as fast as without (s37b, H100: 717.69, 717.65 ms
// against 714.11, 717.77).
func qkvGEMMFromEnv() bool { return os.Getenv("FT_QKV_GEMM") == "1" }

// gemmFusedDefines is what goes ahead of the fused GEMMs' source for a
// tile-order group of group row tiles (Backend.FusedGroup): "" for 0, the
// file's own (16).
func gemmFusedDefines(group int) string {
	if group <= 0 {
		return ""
	}
	return fmt.Sprintf("#define GS_GM %d\n", group)
}
