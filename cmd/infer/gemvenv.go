package main

// gemvValues are the values FT_GEMV takes (extraEnv): "" (the default,
// "mixed" below), "pipe" (kernels/cuda/gemvpipe.cu's software-pipelined
// GEMVs everywhere), "persist"
// (gemv.cu's persistent GEMVs, the default before), "rowblocks", and
// "bal2"/"bal4" (kernels/cuda/gemvpipe_bal.cu's split-K twins of the
// pipelined GEMVs, each row cut into 2 or 4 segments; "bal": the split
// chosen per product; off by default), and "mixed" (q/k/v on gemv.cu's
// gemv3_bf16, the rest pipelined; the default).
var gemvValues = []string{"", "pipe", "persist", "rowblocks", "bal", "bal2", "bal4", "mixed"}
