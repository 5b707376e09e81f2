package kernels

import (
	"math"
	"math/rand/v2"
)

// PickPlace is where a row's next token is chosen.
type PickPlace int

const (
	// PickOnHost reads the row's logits back and calls Sample.
	PickOnHost PickPlace = iota
	// PickArgmax takes a greedy row's argmax on the device (Argmaxer).
	PickArgmax
	// PickSampleOnDevice draws a temperature-only row on the device
	// (DeviceSampler), with DeviceDraw's parameters.
	PickSampleOnDevice
)

// PickPlaceFor says where a row with settings p over a vocabulary of V is
// chosen on backend b: greedy rows on the device when b takes argmaxes;
// rows with a temperature and neither top-k nor top-p on the device when b
// samples; the rest (and invalid settings, which Sample reports) on the
// host.
func PickPlaceFor(b Backend, p SampleParams, V int) PickPlace {
	if p.Validate() != nil {
		return PickOnHost
	}
	if p.Temperature <= 0 {
		if _, ok := b.(Argmaxer); ok {
			return PickArgmax
		}
		return PickOnHost
	}
	invT := 1 / float64(p.Temperature)
	if _, ok := b.(DeviceSampler); ok && (p.TopK == 0 || p.TopK >= V) && (p.TopP == 0 || p.TopP >= 1) &&
		invT > 0 && invT <= math.MaxFloat32 && !math.IsInf(float64(p.Temperature), 0) {
		return PickSampleOnDevice
	}
	return PickOnHost
}

// DeviceDraw is a device-sampled row's inverse temperature and uniform draw:
// one rng.Float64, as Sample takes for the same settings, rounded to float32
// below 1.
func DeviceDraw(p SampleParams, rng *rand.Rand) (invT, u float32) {
	u = float32(rng.Float64())
	if u >= 1 {
		u = math.Nextafter32(1, 0)
	}
	return float32(1 / float64(p.Temperature)), u
}

// SampleRowReference is DeviceSampler's draw for one row on the host, in
// float64: the first id whose running mass of exp((x−max)·invT) exceeds
// u·total (the last id with mass when rounding leaves none); −1 for a row
// with a NaN or +Inf, or only −Inf. Tests compare devices with it.
func SampleRowReference(row []float32, invT, u float32) int {
	mx := float32(math.Inf(-1))
	for _, v := range row {
		if v != v || v > math.MaxFloat32 {
			return -1
		}
		mx = max(mx, v)
	}
	if math.IsInf(float64(mx), -1) {
		return -1
	}
	var total float64
	last := -1
	for i, v := range row {
		p := math.Exp(float64(v-mx) * float64(invT))
		total += p
		if p > 0 {
			last = i
		}
	}
	target := float64(u) * total
	var run float64
	for i, v := range row {
		run += math.Exp(float64(v-mx) * float64(invT))
		if target < run {
			return i
		}
	}
	return last
}
