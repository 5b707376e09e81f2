// Package cuda is the CUDA backend of package runtime: an NVIDIA GPU as a
// runtime.Device (device memory with byte accounting, pinned host memory,
// streams, events with timing), plus what the CUDA kernels need: NVRTC
// modules and launches, cuBLAS GEMM in bf16 with fp32 accumulation, and CUDA
// graphs. It is the only package of the module that uses cgo.
//
// It is built only with the build tag cuda (make build-cuda / make
// test-cuda), against the CUDA toolkit and gorgonia.org/cu, which the
// Makefile compiles with the compatibility header in compat/ for CUDA 13.
// Without the tag, Open returns an error that says so.
//
// A CUDA build needs the driver library at start-up: without libcuda.so.1
// the dynamic loader refuses to start the program. With the library but no
// usable GPU (cuInit fails), gorgonia.org/cu's package initialisation exits
// the process with status 1; the program first prints what went wrong and
// that a build without the cuda tag runs on the CPU (see internal/probe).
//
// Threads: every call makes the device's (primary) context current on the
// calling OS thread first, so any goroutine may use a Device; the Go
// scheduler moving goroutines between threads is harmless.
package cuda
