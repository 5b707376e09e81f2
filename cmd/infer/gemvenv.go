package main

// gemvValues are the values FT_GEMV takes (extraEnv): "" and "pipe" (the
// default: kernels/cuda/gemvpipe.cu's software-pipelined GEMVs), "pipe8"
// (deeper), "persist" (gemv.cu's persistent GEMVs, the default before),
// "rowblocks" and "bulk".
var gemvValues = []string{"", "pipe", "pipe8", "persist", "rowblocks", "bulk"}
