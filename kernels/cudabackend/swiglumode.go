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

// swigluGEMMFromEnv is the default of Backend.SwiGLUGEMM: on unless
// FT_SWIGLU_GEMM=0 (New rejects values other than "", "0" and "1"). On by
// default since s23b: prefill 8,192 212.59, 212.44 ms against 216.09,
// 215.79 off; 64 × 512 726.86, 730.22 against 732.42, 746.50
// (interleaved; bench/RESULTS.md).
func swigluGEMMFromEnv() bool { return os.Getenv("FT_SWIGLU_GEMM") != "0" }
