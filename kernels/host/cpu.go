package host

import "fmt"

// Level is an instruction set the host kernels can use.
type Level int

const (
	// Auto picks the best level this CPU supports (Detect).
	Auto Level = iota
	// Generic is the pure-Go reference kernels of package kernels.
	Generic
	// AVX2 is the 8-lane assembly (AVX2, FMA, F16C).
	AVX2
	// AVX512 is the 16-lane assembly (AVX-512F on top of AVX2's set).
	AVX512
)

// String is the level's name: auto, generic, avx2, avx512.
func (l Level) String() string {
	switch l {
	case Auto:
		return "auto"
	case Generic:
		return "generic"
	case AVX2:
		return "avx2"
	case AVX512:
		return "avx512"
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

// ParseLevel reads a level name (String's).
func ParseLevel(s string) (Level, error) {
	for _, l := range []Level{Auto, Generic, AVX2, AVX512} {
		if s == l.String() {
			return l, nil
		}
	}
	return 0, fmt.Errorf("host: level %q: want auto, generic, avx2 or avx512", s)
}

// Supported reports whether this CPU (and OS) can run level l. Auto and
// Generic always can.
func Supported(l Level) bool { return l == Auto || hasLevel(l) }

// Detect returns the best level this CPU supports, checked at run time.
func Detect() Level {
	for _, l := range []Level{AVX512, AVX2} {
		if hasLevel(l) {
			return l
		}
	}
	return Generic
}

// Levels returns every level this CPU supports, Generic first.
func Levels() []Level {
	var ls []Level
	for _, l := range []Level{Generic, AVX2, AVX512} {
		if hasLevel(l) {
			ls = append(ls, l)
		}
	}
	return ls
}

// simd is one level's micro-kernels (see asm_amd64.go).
type simd struct {
	lanes    int
	r4BF16   func(w *uint16, ld uintptr, x *float32, n int, out *[4]float32)
	r4F16    func(w *uint16, ld uintptr, x *float32, n int, out *[4]float32)
	r4F32    func(w *float32, ld uintptr, x *float32, n int, out *[4]float32)
	r4FP8    func(w *uint8, ld uintptr, x *float32, n int, out *[4]float32)
	t4BF16   func(w *uint16, x0, x1, x2, x3 *float32, n int, out *[4]float32)
	t4F16    func(w *uint16, x0, x1, x2, x3 *float32, n int, out *[4]float32)
	t4F32    func(w *float32, x0, x1, x2, x3 *float32, n int, out *[4]float32)
	t4FP8    func(w *uint8, x0, x1, x2, x3 *float32, n int, out *[4]float32)
	r2t4BF16 func(w *uint16, ld uintptr, x0, x1, x2, x3 *float32, n int, out *[8]float32)
	r2t4F16  func(w *uint16, ld uintptr, x0, x1, x2, x3 *float32, n int, out *[8]float32)
	r2t4F32  func(w *float32, ld uintptr, x0, x1, x2, x3 *float32, n int, out *[8]float32)
	r2t4FP8  func(w *uint8, ld uintptr, x0, x1, x2, x3 *float32, n int, out *[8]float32)
	sum      func(p *float32, n int) float32
	axpy     func(y, x *float32, a float32, n int)
	// wsum4 adds four heads' weighted sums of m rows over wsumCols
	// columns: o_h[0:wsumCols] += Σ_i a[h·as/4 + i]·v[i·ld/4 : …].
	wsum4    func(o0, o1, o2, o3 *float32, a *float32, as uintptr, v *float32, ld uintptr, m int)
	wsumCols int
	// r4pfBF16 is r4BF16 prefetching each row pf bytes ahead
	// (FT_HOST_PREFETCH).
	r4pfBF16 func(w *uint16, ld uintptr, x *float32, n int, out *[4]float32, pf uintptr)
}
