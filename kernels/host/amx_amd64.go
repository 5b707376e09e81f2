//go:build amd64

package host

import (
	"sync"

	"golang.org/x/sys/cpu"
)

// The AMX instructions amx_amd64.s spells as bytes, as GNU as 2.40
// encodes them:
//
//	LDTILECFG (AX)                 C4 E2 78 49 00
//	TILERELEASE                    C4 E2 78 49 C0
//	TILEZERO TMMt                  C4 E2 7B 49 C0|t<<3
//	TILELOADD (base)(index*1), TMMt  C4 E2 7B 4B t<<3|4 index<<3|base
//	TILESTORED TMMt, (base)(index*1) C4 E2 7A 4B t<<3|4 index<<3|base
//	TDPBF16PS TMMd += TMMa·TMMb    C4 E2 (^b&15)<<3|2 5C C0|d<<3|a
//
// (registers AX 0, CX 1, DX 2, BX 3, SI 6, DI 7; amx_test.go checks the
// products against the reference kernels'.)

//go:noescape
func amxPanel(cfg *[64]byte, w *uint16, ldw uintptr, x *uint16, tbStride uintptr, ntb, passes, ksteps int, c *float32, load int)

var amxOnce struct {
	sync.Once
	ok bool
}

// hasAMX reports whether this CPU has AMX-BF16 and the OS lets this
// process use the tiles (asked for on the first call).
func hasAMX() bool {
	amxOnce.Do(func() {
		// The packing and the transposes use AVX-512 F and BW.
		if !cpu.X86.HasAMXTile || !cpu.X86.HasAMXBF16 || !hasLevel(AVX512) || !cpu.X86.HasAVX512BW {
			return
		}
		amxOnce.ok = amxPermit()
	})
	return amxOnce.ok
}

//go:noescape
func amxTranspose(dst *float32, ldo uintptr, src *float32, nt int, acc int, scale *float32)

//go:noescape
func fp8ToBF16AVX512(dst *uint16, src *uint8, n int)

//go:noescape
func amxPackAVX512(dst *uint16, src *float32, ldx uintptr, nt, passes int, scratch *[256]uint32)
