package main

import "github.com/flextensor-go/flextensor/kernels/cudabackend"

// fp8VariantValues are the values FT_FP8_VARIANT takes: empty (the
// default tuning) or a variant the CUDA backend compiles.
var fp8VariantValues = append([]string{""}, cudabackend.FP8VariantNames()...)
