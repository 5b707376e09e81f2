package kernels

import (
	"fmt"
	"math"
	"sync"

	"github.com/flextensor-go/flextensor/runtime"
)

// Mat is a read-only row-major matrix (a vector when Rows = 1) in its stored
// dtype: element (r,c) is F32[r*Cols+c] for F32, or the bits Half[r*Cols+c]
// for BF16 and F16. The unused slice is nil.
type Mat struct {
	DType      runtime.DType
	F32        []float32
	Half       []uint16 // BF16 or F16 bits
	Rows, Cols int
}

// Validate checks that the dtype is F32, BF16 or F16 and that the slice of
// that dtype holds exactly Rows*Cols values.
func (m Mat) Validate() error {
	if m.Rows < 0 || m.Cols < 0 {
		return fmt.Errorf("kernels.Mat: negative shape %dx%d", m.Rows, m.Cols)
	}
	want := m.Rows * m.Cols
	switch m.DType {
	case runtime.F32:
		if len(m.F32) != want {
			return fmt.Errorf("kernels.Mat: F32 %dx%d has %d values, want Rows*Cols = %d", m.Rows, m.Cols, len(m.F32), want)
		}
	case runtime.BF16, runtime.F16:
		if len(m.Half) != want {
			return fmt.Errorf("kernels.Mat: %v %dx%d has %d values, want Rows*Cols = %d", m.DType, m.Rows, m.Cols, len(m.Half), want)
		}
	default:
		return fmt.Errorf("kernels.Mat: dtype %v not supported (want F32, BF16 or F16)", m.DType)
	}
	return nil
}

// RowF32 widens row i into dst[:Cols]: dst[c] = float32(m[i,c]). It panics if
// i is out of range or dst is shorter than Cols.
func (m Mat) RowF32(i int, dst []float32) {
	if i < 0 || i >= m.Rows {
		panic(fmt.Sprintf("kernels.Mat.RowF32: row %d outside [0,%d)", i, m.Rows))
	}
	m.widenRows(dst[:m.Cols], i, i+1)
}

// widenRows writes rows [r0,r1) as float32 into dst[:(r1-r0)*Cols], on the
// calling goroutine.
func (m Mat) widenRows(dst []float32, r0, r1 int) {
	lo, hi := r0*m.Cols, r1*m.Cols
	switch m.DType {
	case runtime.F32:
		copy(dst[:hi-lo], m.F32[lo:hi])
	case runtime.BF16:
		widenBF16(dst[:hi-lo], m.Half[lo:hi])
	case runtime.F16:
		widenF16(dst[:hi-lo], m.Half[lo:hi])
	default:
		panic(fmt.Sprintf("kernels.Mat: dtype %v not supported", m.DType))
	}
}

// convGrain is the number of values below which a conversion runs inline: a
// few µs of work, the cost of waking a helper.
const convGrain = 1 << 16

// BF16ToF32 widens bfloat16 bits: dst[i] = float32 with bits src[i]<<16.
// It panics if len(dst) < len(src).
func BF16ToF32(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	if !splits(len(src), convGrain) {
		widenBF16(dst, src)
		return
	}
	parallelFor(len(src), convGrain, func(_, lo, hi int) { widenBF16(dst[lo:hi], src[lo:hi]) })
}

// widenBF16 is BF16ToF32 on one goroutine, eight values per iteration, all
// in integer registers (a bf16 is the top half of its float32).
func widenBF16(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	i := 0
	for ; i+8 <= len(src); i += 8 {
		s := src[i : i+8 : i+8]
		d := dst[i : i+8 : i+8]
		d[0] = math.Float32frombits(uint32(s[0]) << 16)
		d[1] = math.Float32frombits(uint32(s[1]) << 16)
		d[2] = math.Float32frombits(uint32(s[2]) << 16)
		d[3] = math.Float32frombits(uint32(s[3]) << 16)
		d[4] = math.Float32frombits(uint32(s[4]) << 16)
		d[5] = math.Float32frombits(uint32(s[5]) << 16)
		d[6] = math.Float32frombits(uint32(s[6]) << 16)
		d[7] = math.Float32frombits(uint32(s[7]) << 16)
	}
	for ; i < len(src); i++ {
		dst[i] = math.Float32frombits(uint32(src[i]) << 16)
	}
}

// F32ToBF16 narrows to bfloat16 with round-to-nearest-even:
// dst[i] = (bits(src[i]) + 0x7fff + bit16) >> 16, NaN kept a (quiet) NaN.
// It panics if len(dst) < len(src).
func F32ToBF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	if !splits(len(src), convGrain) {
		narrowBF16(dst, src)
		return
	}
	parallelFor(len(src), convGrain, func(_, lo, hi int) { narrowBF16(dst[lo:hi], src[lo:hi]) })
}

func narrowBF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		u := math.Float32bits(f)
		if u&0x7fffffff > 0x7f800000 {
			dst[i] = uint16(u>>16) | 0x40
			continue
		}
		dst[i] = uint16((u + 0x7fff + (u>>16)&1) >> 16)
	}
}

// F16ToF32 widens IEEE binary16 bits exactly: dst[i] = float32(half(src[i]))
// (subnormals and infinities included; a NaN keeps its payload and becomes
// quiet, as F16C hardware and github.com/x448/float16 do). It panics if
// len(dst) < len(src).
func F16ToF32(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	if !splits(len(src), convGrain) {
		widenF16(dst, src)
		return
	}
	parallelFor(len(src), convGrain, func(_, lo, hi int) { widenF16(dst[lo:hi], src[lo:hi]) })
}

// f16Table maps every binary16 bit pattern to its float32 value (256 KiB,
// built on first use): one L2-resident load per value.
var (
	f16Once  sync.Once
	f16Table *[1 << 16]float32
)

func f16Lookup() *[1 << 16]float32 {
	f16Once.Do(func() {
		t := new([1 << 16]float32)
		for h := range t {
			t[h] = math.Float32frombits(f16Bits(uint16(h)))
		}
		f16Table = t
	})
	return f16Table
}

// f16Bits converts binary16 bits to binary32 bits exactly.
func f16Bits(h uint16) uint32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f && man == 0: // Inf
		return sign | 0x7f800000
	case exp == 0x1f: // NaN: keep the payload, made quiet as F16C hardware does
		return sign | 0x7fc00000 | man<<13
	case exp != 0: // normal: rebias 15 -> 127
		return sign | (exp+112)<<23 | man<<13
	case man == 0:
		return sign
	default: // subnormal: man·2^-24, normalise
		e := uint32(113) // exponent of 2^-14 in binary32 is 113
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		return sign | e<<23 | (man&0x3ff)<<13
	}
}

func widenF16(dst []float32, src []uint16) {
	t := f16Lookup()
	dst = dst[:len(src)]
	i := 0
	for ; i+4 <= len(src); i += 4 {
		s := src[i : i+4 : i+4]
		d := dst[i : i+4 : i+4]
		d[0] = t[s[0]]
		d[1] = t[s[1]]
		d[2] = t[s[2]]
		d[3] = t[s[3]]
	}
	for ; i < len(src); i++ {
		dst[i] = t[src[i]]
	}
}
