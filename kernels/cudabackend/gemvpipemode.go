package cudabackend

// gemvPipeDepths are the FT_GEMV values that pick pipelined GEMVs, each
// the infix of its kernels' names (kernels/cuda/gemvpipe.cu).
var gemvPipeDepths = []string{"pipe"}

// gemvPipeDefault is the depth without FT_GEMV, and under FT_GEMV=mixed and
// bal* (parseGEMV). Measured on the H200
// (2026-12-01, Llama-3-8B resident decode at context 512, bench/RESULTS.md
// s7c/s7d): the graph step 4.23 and 4.24 ms against 4.34 and 4.31 for
// gemv.cu's kernels, run-model 4.18 and 4.20 ms a token against 4.25.
const gemvPipeDefault = "pipe"
