package main

// cudaSchedValues are FT_CUDA_SCHED's values (runtime/cuda.ParseSched).
var cudaSchedValues = []string{"", "auto", "spin", "yield", "blocking"}
