package cudabackend

import "os"

// The fused gate/up GEMM's settings (swiglugemm.go, cuda builds), here
// without a build tag so that the tests of the sm_90a extra files see
// them in every build.

// swigluFile is the kernel's file in kernels/cuda/sm90a/extra, compiled as
// a module of its own on the first call.
const swigluFile = "gemm_swiglu.cu"

// swigluSmem is the kernel's dynamic shared memory (GS_SMEM: 1,024 bytes
// of alignment and four stages of 48 KiB).
const swigluSmem = 1024 + 4*48*1024

// swigluMinTokens is the fewest rows GateUpSiLUFused takes: below a few
// row tiles a layer's tiles do not fill the device.
const swigluMinTokens = 256

// swigluGEMMFromEnv is the default of Backend.SwiGLUGEMM: 0 (off) unless
// FT_SWIGLU_GEMM is 1 (the kernel) or 2 (its clusters of two blocks).
func swigluGEMMFromEnv() int {
	switch os.Getenv("FT_SWIGLU_GEMM") {
	case "1":
		return 1
	case "2":
		return 2
	}
	return 0
}
