//go:build cuda

package cudabackend

import (
	"os"
	"strings"

	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// Early-issue twins of the one-token BF16 GEMVs (Backend.GEMVEarly, on by
// default; kernels/cuda/gemv.cu's gemv3_early_bf16 and
// gemvpipe.cu's pipe_early kernels): each warp issues its first batch of
// weight loads before the dependent-launch wait, so a GEMV behind a kernel
// that leaves most SMs free (RMSNorm, the decode attention) streams while
// that kernel runs. Same arguments, grids and bits as the kernels they
// replace. On by default; FT_GEMV_EARLY=0 runs the plain kernels.
//
// Their weights must not be written by the kernel just ahead of them on
// the stream (kernels/cuda/common.cuh's ft_pdl_wait contract). Every
// one-token product through gemvFn (MatMul, MatMulN, MatMulAdd,
// GateUpSiLU at one token) takes them; today's callers pass model weights,
// resident or streamed in on the copy stream behind an event, which no
// compute kernel writes. A product over a matrix a kernel has just written
// needs GEMVEarly off.
//
// Measured on the H200 (2026-12-03, bench/h200-s15b.sh, resident, graph
// replayed, same generated ids on and off): Llama-3-8B run-model 256
// tokens 4.03, 4.04, 4.03 against 4.04 three times; graph step at 512
// 4.17 against 4.19 ms, at 8,192 4.56 against 4.57; Qwen3-8B run-model
// 4.26 twice against 4.28 twice. Small (0-0.02 ms a token): faster or
// equal in every pair, never slower.

// gemvEarlyFromEnv is the default of Backend.GEMVEarly: on unless
// FT_GEMV_EARLY=0.
func gemvEarlyFromEnv() bool { return os.Getenv("FT_GEMV_EARLY") != "0" }

// loadGEMVEarly maps gemv3_bf16 and the default depth's pipelined kernels
// (which must be loaded: loadGEMVPipe) to their early twins; only that
// depth has them (gemvpipe.cu's pipe_early).
func (ks *kernelSet) loadGEMVEarly(get func(string) *cuda.Function) {
	ks.gemvEarly = map[*cuda.Function]*cuda.Function{ks.gemv3: get("gemv3_early_bf16")}
	for _, f := range ks.gemvPipe.twin[gemvPipeDefault] {
		ks.gemvEarly[f] = get(strings.Replace(f.Name(), "_pipe_", "_pipe_early_", 1))
	}
}

// earlyFunctions are the early twins (all call ft_pdl_wait before they
// touch x or y: pdl.go).
func (ks *kernelSet) earlyFunctions() []*cuda.Function {
	fs := make([]*cuda.Function, 0, len(ks.gemvEarly))
	for _, f := range ks.gemvEarly {
		fs = append(fs, f)
	}
	return fs
}

// early is f's early twin under b.GEMVEarly, else f.
func (b *Backend) early(f *cuda.Function) *cuda.Function {
	if b.GEMVEarly {
		if t := b.k.gemvEarly[f]; t != nil {
			return t
		}
	}
	return f
}
