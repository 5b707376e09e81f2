//go:build !amd64

package host

// hasAMX: the tiles are an amd64 feature.
func hasAMX() bool { return false }

func amxPanel(cfg *[64]byte, w *uint16, ldw uintptr, x *uint16, tbStride uintptr, ntb, passes, ksteps int, c *float32, load int) {
	panic("host: amxPanel off amd64")
}

func fp8ToBF16AVX512(dst *uint16, src *uint8, n int) { panic("host: fp8ToBF16AVX512 off amd64") }

func amxTranspose(dst *float32, ldo uintptr, src *float32, nt int, acc int, scale *float32) {
	panic("host: amxTranspose off amd64")
}

func amxPackAVX512(dst *uint16, src *float32, ldx uintptr, nt, passes int, scratch *[256]uint32) {
	panic("host: amxPackAVX512 off amd64")
}
