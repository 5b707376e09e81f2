//go:build cuda

// Package probe runs before gorgonia.org/cu's package initialisation, which
// calls cuInit and exits the process with status 1 when it fails. Its own
// init calls cuInit first and, if that fails, prints what went wrong and
// what to do before the exit comes.
//
// The order holds because package initialisation picks, among the packages
// whose imports are initialised, the first by import path
// ("github.com/…" before "gorgonia.org/…"), and this package imports
// nothing but cgo, which gorgonia.org/cu imports too.
package probe

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>
#include <stdio.h>

static void ft_probe(void) {
	CUresult r = cuInit(0);
	if (r == CUDA_SUCCESS) return;
	const char* name = NULL;
	const char* msg = NULL;
	cuGetErrorName(r, &name);
	cuGetErrorString(r, &msg);
	fprintf(stderr,
		"flextensor: the CUDA driver could not be initialised: cuInit: %s (%d): %s.\n"
		"flextensor: this program was built with -tags cuda and needs an NVIDIA GPU and driver;\n"
		"flextensor: gorgonia.org/cu exits now. Build without the tag (make build) to run on the CPU.\n",
		name ? name : "CUDA_ERROR_UNKNOWN", (int)r, msg ? msg : "unknown error");
	fflush(stderr);
}
*/
import "C"

func init() { C.ft_probe() }
