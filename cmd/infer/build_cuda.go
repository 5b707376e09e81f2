//go:build cuda

package main

// builtWithCUDA says whether this binary was built with the cuda tag.
const builtWithCUDA = true
