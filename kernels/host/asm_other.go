//go:build !amd64

package host

// hasLevel: only the pure-Go kernels off amd64.
func hasLevel(l Level) bool { return l == Generic }

var simdSets = map[Level]*simd{}
