//go:build !amd64

package host

// hasLevel: only the pure-Go kernels off amd64.
func hasLevel(l Level) bool { return l == Generic }

var simdSets = map[Level]*simd{}

// hasAVX512: never off amd64.
const hasAVX512 = false

func siluMulAVX512(out, gate, up *float32, n int) {
	panic("host: siluMulAVX512 off amd64")
}

func expShiftAVX512(out, in *float32, shift float32, n int) {
	panic("host: expShiftAVX512 off amd64")
}
