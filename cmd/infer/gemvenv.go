package main

// gemvValues are the values FT_GEMV takes (extraEnv): "" (gemv.cu's
// persistent GEMVs), "rowblocks", "bulk", and the software-pipelined GEMVs
// of kernels/cuda/gemvpipe.cu at depth "pipe" or "pipe8".
var gemvValues = []string{"", "rowblocks", "bulk", "pipe", "pipe8"}
