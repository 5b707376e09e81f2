package kernels

import "math"

// The float32 micro-kernels under MatMul and Attention. The half-precision
// variants sum in exactly the order of their float32 twins (widening is
// exact), so a MatMul row gives the same bits whether it comes from a GEMV or
// from a GEMM over many rows. Go has no SIMD, so
// speed comes from independent accumulators that hide the add latency and
// from reusing each loaded value for several products. Measured on amd64
// (Go's register allocator spills beyond about 12 live floats): one x value
// against four rows with four accumulators beats 8-accumulator, 2×4 and 4×2
// blockings, which spill.

// dot returns Σ_k x[k]·y[k] over k < len(x); y must be at least as long.
func dot(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	k := 0
	for ; k+4 <= len(x); k += 4 {
		a := x[k : k+4 : k+4]
		b := y[k : k+4 : k+4]
		s0 += a[0] * b[0]
		s1 += a[1] * b[1]
		s2 += a[2] * b[2]
		s3 += a[3] * b[3]
	}
	for ; k < len(x); k++ {
		s0 += x[k] * y[k]
	}
	return (s0 + s1) + (s2 + s3)
}

// dot1x4 returns s_r = Σ_k x[k]·w_r[k] for the four rows w0..w3 (each at
// least len(x) long): every x[k] is loaded once for four products.
func dot1x4(x, w0, w1, w2, w3 []float32) (s0, s1, s2, s3 float32) {
	n := len(x)
	w0, w1, w2, w3 = w0[:n], w1[:n], w2[:n], w3[:n]
	for k, a := range x {
		s0 += a * w0[k]
		s1 += a * w1[k]
		s2 += a * w2[k]
		s3 += a * w3[k]
	}
	return
}

// dot1x4BF16 is dot1x4 with bfloat16 rows widened on the fly (a bf16 is the
// top half of its float32), for the memory-bound decode GEMV: no scratch,
// and each weight byte is read once.
func dot1x4BF16(x []float32, w0, w1, w2, w3 []uint16) (s0, s1, s2, s3 float32) {
	n := len(x)
	w0, w1, w2, w3 = w0[:n], w1[:n], w2[:n], w3[:n]
	for k, a := range x {
		s0 += a * math.Float32frombits(uint32(w0[k])<<16)
		s1 += a * math.Float32frombits(uint32(w1[k])<<16)
		s2 += a * math.Float32frombits(uint32(w2[k])<<16)
		s3 += a * math.Float32frombits(uint32(w3[k])<<16)
	}
	return
}

// dotBF16 returns Σ_k x[k]·bf16(w[k]), summed in the order of dot.
func dotBF16(x []float32, w []uint16) float32 {
	w = w[:len(x)]
	var s0, s1, s2, s3 float32
	k := 0
	for ; k+4 <= len(x); k += 4 {
		a := x[k : k+4 : k+4]
		b := w[k : k+4 : k+4]
		s0 += a[0] * math.Float32frombits(uint32(b[0])<<16)
		s1 += a[1] * math.Float32frombits(uint32(b[1])<<16)
		s2 += a[2] * math.Float32frombits(uint32(b[2])<<16)
		s3 += a[3] * math.Float32frombits(uint32(b[3])<<16)
	}
	for ; k < len(x); k++ {
		s0 += x[k] * math.Float32frombits(uint32(w[k])<<16)
	}
	return (s0 + s1) + (s2 + s3)
}

// dot1x4F16 is dot1x4 with binary16 rows widened through the table t.
func dot1x4F16(t *[1 << 16]float32, x []float32, w0, w1, w2, w3 []uint16) (s0, s1, s2, s3 float32) {
	n := len(x)
	w0, w1, w2, w3 = w0[:n], w1[:n], w2[:n], w3[:n]
	for k, a := range x {
		s0 += a * t[w0[k]]
		s1 += a * t[w1[k]]
		s2 += a * t[w2[k]]
		s3 += a * t[w3[k]]
	}
	return
}

// dotF16 returns Σ_k x[k]·t[w[k]], summed in the order of dot.
func dotF16(t *[1 << 16]float32, x []float32, w []uint16) float32 {
	w = w[:len(x)]
	var s0, s1, s2, s3 float32
	k := 0
	for ; k+4 <= len(x); k += 4 {
		a := x[k : k+4 : k+4]
		b := w[k : k+4 : k+4]
		s0 += a[0] * t[b[0]]
		s1 += a[1] * t[b[1]]
		s2 += a[2] * t[b[2]]
		s3 += a[3] * t[b[3]]
	}
	for ; k < len(x); k++ {
		s0 += x[k] * t[w[k]]
	}
	return (s0 + s1) + (s2 + s3)
}
