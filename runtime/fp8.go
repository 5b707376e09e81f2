package runtime

import "math"

// The two 8-bit float formats safetensors names (F8_E4M3, F8_E5M2), as
// PyTorch's float8_e4m3fn and float8_e5m2 define them:
//
//   - E4M3: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities,
//     S.1111.111 is NaN, the largest finite magnitude is 448, the smallest
//     subnormal 2^-9.
//   - E5M2: sign, 5 exponent bits (bias 15), 2 mantissa bits; IEEE 754
//     infinities and NaNs, largest finite 57344, smallest subnormal 2^-16.

// F8E4M3Max is the largest finite E4M3 magnitude.
const F8E4M3Max = 448

// f8e4m3Table and f8e5m2Table widen every byte.
var f8e4m3Table, f8e5m2Table = fp8Tables()

func fp8Tables() (e4 [256]float32, e5 [256]float32) {
	for b := 0; b < 256; b++ {
		sign := 1.0
		if b&0x80 != 0 {
			sign = -1
		}
		// E4M3
		exp, man := (b>>3)&0xf, b&7
		switch {
		case exp == 0xf && man == 7:
			e4[b] = float32(math.NaN())
		case exp == 0:
			e4[b] = float32(sign * float64(man) / 8 * math.Exp2(-6))
		default:
			e4[b] = float32(sign * (1 + float64(man)/8) * math.Exp2(float64(exp-7)))
		}
		// E5M2
		exp, man = (b>>2)&0x1f, b&3
		switch {
		case exp == 0x1f && man == 0:
			e5[b] = float32(math.Inf(int(sign)))
		case exp == 0x1f:
			e5[b] = float32(math.NaN())
		case exp == 0:
			e5[b] = float32(sign * float64(man) / 4 * math.Exp2(-14))
		default:
			e5[b] = float32(sign * (1 + float64(man)/4) * math.Exp2(float64(exp-15)))
		}
	}
	return
}

// F8E4M3ToF32 widens one E4M3 value (exactly).
func F8E4M3ToF32(b uint8) float32 { return f8e4m3Table[b] }

// F8E5M2ToF32 widens one E5M2 value (exactly).
func F8E5M2ToF32(b uint8) float32 { return f8e5m2Table[b] }

// F8E4M3Table is the 256-entry table F8E4M3ToF32 reads (for kernels that
// widen many values); it must not be modified.
func F8E4M3Table() *[256]float32 { return &f8e4m3Table }

// F8E5M2Table is the 256-entry table F8E5M2ToF32 reads; it must not be
// modified.
func F8E5M2Table() *[256]float32 { return &f8e5m2Table }

// F32ToF8E4M3 narrows a binary32 to E4M3 with round-to-nearest-even. The
// format has no infinities: magnitudes beyond 448 (infinities included)
// saturate to ±448, as the quantizers that write FP8 checkpoints clamp
// before the cast; NaN stays NaN.
func F32ToF8E4M3(f float32) uint8 {
	u := math.Float32bits(f)
	sign := uint8(u>>24) & 0x80
	a := u & 0x7fffffff
	if a > 0x7f800000 {
		return sign | 0x7f
	}
	af := math.Float32frombits(a)
	if af >= F8E4M3Max {
		return sign | 0x7e
	}
	if af < 1.0/64 { // below the smallest normal 2^-6: multiples of 2^-9
		return sign | uint8(math.RoundToEven(float64(af)*512))
	}
	// Round the 23-bit mantissa to 3 bits (a carry moves into the exponent).
	r := (a + (1<<19 - 1) + (a>>20)&1) >> 20
	code := r - (127-7)<<3
	if code > 0x7e {
		code = 0x7e
	}
	return sign | uint8(code)
}

// F32ToF8E5M2 narrows a binary32 to E5M2 with round-to-nearest-even, as
// IEEE 754 does: overflow becomes an infinity, NaN stays NaN.
func F32ToF8E5M2(f float32) uint8 {
	u := math.Float32bits(f)
	sign := uint8(u>>24) & 0x80
	a := u & 0x7fffffff
	switch {
	case a > 0x7f800000:
		return sign | 0x7e
	case a == 0x7f800000:
		return sign | 0x7c
	}
	af := math.Float32frombits(a)
	if af < 1.0/16384 { // below the smallest normal 2^-14: multiples of 2^-16
		return sign | uint8(math.RoundToEven(float64(af)*65536))
	}
	r := (a + (1<<20 - 1) + (a>>21)&1) >> 21
	code := r - (127-15)<<2
	if code >= 0x7c {
		code = 0x7c
	}
	return sign | uint8(code)
}
