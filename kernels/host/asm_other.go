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

func expShiftAVX512(out, in *float32, shift float32, n int, sums *[16]float32) {
	panic("host: expShiftAVX512 off amd64")
}

func maxAVX512(p *float32, n int, out *[16]float32) { panic("host: maxAVX512 off amd64") }
