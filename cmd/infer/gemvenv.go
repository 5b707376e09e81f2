package main

import "github.com/flextensor-go/flextensor/kernels/cudabackend"

// gemvValues are the values FT_GEMV takes (extraEnv), the backend's own
// list (cudabackend.GEMVValues, its parser's): "" (the default, "mixed"),
// "mixed" (q/k/v on gemv.cu's gemv3_bf16, the rest pipelined), "persist"
// (gemv.cu's persistent GEMVs), "rowblocks", "pipe"
// (kernels/cuda/gemvpipe.cu's software-pipelined GEMVs everywhere), and
// "bal"/"bal2"/"bal4" (kernels/cuda/gemvpipe_bal.cu's split-K twins of the
// pipelined GEMVs: the split chosen per product, or each row cut into 2 or
// 4 segments; off by default).
var gemvValues = cudabackend.GEMVValues()
