// Package bench holds the GPU benchmarks (build tag cuda: make bench-cuda)
// and their results, RESULTS.md. The CPU benchmarks live beside the code
// they time (kernels, models/llama).
package bench
