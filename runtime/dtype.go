// Package runtime holds the executor's data model: element types, shapes,
// tensors, devices (cpu, meta, and cuda behind a build tag), buffers, streams,
// events and memory accounting.
package runtime

import (
	"encoding/binary"
	"fmt"
	"math"
	goruntime "runtime"
	"strings"
	"sync"
)

// DType is the element type of a tensor.
type DType uint8

// The element types the executor knows.
const (
	Invalid DType = iota
	F32           // IEEE 754 binary32
	F16           // IEEE 754 binary16
	BF16          // bfloat16: the top 16 bits of a binary32
	I32           // two's-complement 32-bit integer
	I64           // two's-complement 64-bit integer (token ids in some checkpoints)
	U8            // unsigned byte
	F8E4M3        // 8-bit float, 4 exponent bits, 3 mantissa bits, no infinities ("F8_E4M3", PyTorch float8_e4m3fn)
	F8E5M2        // 8-bit float, 5 exponent bits, 2 mantissa bits, IEEE-like ("F8_E5M2", PyTorch float8_e5m2)
)

var dtypeNames = [...]string{Invalid: "invalid", F32: "F32", F16: "F16", BF16: "BF16", I32: "I32", I64: "I64", U8: "U8",
	F8E4M3: "F8_E4M3", F8E5M2: "F8_E5M2"}
var dtypeSizes = [...]int{Invalid: 0, F32: 4, F16: 2, BF16: 2, I32: 4, I64: 8, U8: 1, F8E4M3: 1, F8E5M2: 1}

// Size is the number of bytes of one element.
func (d DType) Size() int {
	if int(d) >= len(dtypeSizes) {
		return 0
	}
	return dtypeSizes[d]
}

// String is the safetensors spelling of the type ("F32", "BF16", ...).
func (d DType) String() string {
	if int(d) >= len(dtypeNames) {
		return fmt.Sprintf("DType(%d)", uint8(d))
	}
	return dtypeNames[d]
}

// ParseDType reads a safetensors dtype name ("BF16", "F32", ...); the match
// ignores case. An unknown name is an error that names it.
func ParseDType(s string) (DType, error) {
	for i, n := range dtypeNames {
		if i != int(Invalid) && strings.EqualFold(n, s) {
			return DType(i), nil
		}
	}
	return Invalid, fmt.Errorf("unknown dtype %q (known: F32, F16, BF16, I32, I64, U8, F8_E4M3, F8_E5M2)", s)
}

// BF16ToF32 widens one bfloat16 value: its bits are the high half of a binary32.
func BF16ToF32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// F32ToBF16 narrows a binary32 to bfloat16 with round-to-nearest-even; NaN stays NaN.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 { // NaN: keep it quiet and non-zero
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// Convert copies the values of src (of dtype sd) into dst (of dtype dd):
// the same bytes where the dtypes are equal, else F32 ↔ BF16 (widened
// exactly, narrowed with F32ToBF16's rounding). dst holds as many values
// as src. Other pairs are an error naming them. Large conversions are
// split over the machine's cores (a KV pool of a batch's sequences is
// hundreds of MB).
func Convert(dst []byte, dd DType, src []byte, sd DType) error {
	switch {
	case dd == sd:
		copy(dst, src)
		return nil
	case dd == F32 && sd == BF16, dd == BF16 && sd == F32:
	default:
		return fmt.Errorf("runtime.Convert: cannot convert %v to %v", sd, dd)
	}
	n := len(src) / sd.Size()
	parts := min(goruntime.GOMAXPROCS(0), n/convertPart)
	if parts <= 1 {
		convert(dst, dd, src, n)
		return nil
	}
	var wg sync.WaitGroup
	for p := range parts {
		lo, hi := n*p/parts, n*(p+1)/parts
		wg.Add(1)
		go func() {
			defer wg.Done()
			convert(dst[lo*dd.Size():], dd, src[lo*sd.Size():], hi-lo)
		}()
	}
	wg.Wait()
	return nil
}

// convertPart is the fewest values a goroutine of Convert takes.
const convertPart = 1 << 18

// convert is Convert of n values F32 ↔ BF16 on one goroutine.
func convert(dst []byte, dd DType, src []byte, n int) {
	if dd == F32 {
		for i := range n {
			f := BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(f))
		}
		return
	}
	for i := range n {
		f := math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(f))
	}
}
