package main

// gemvValues are the values FT_GEMV takes (extraEnv): "" and "pipe" (the
// default: kernels/cuda/gemvpipe.cu's software-pipelined GEMVs), "persist"
// (gemv.cu's persistent GEMVs, the default before) and "rowblocks".
var gemvValues = []string{"", "pipe", "persist", "rowblocks"}
