package main

import "github.com/flextensor-go/flextensor/kernels/cudabackend"

// fp8VariantValues are the values FT_FP8_VARIANT takes: empty or "auto"
// (the default: the variant picked per kind of GEMV and width) or a
// variant the CUDA backend compiles, forced everywhere (u8r1s: the default
// before auto).
var fp8VariantValues = append([]string{""}, cudabackend.FP8VariantNames()...)
