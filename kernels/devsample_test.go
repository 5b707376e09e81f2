package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestSampleRowReferenceIsSample: the device sampler's reference draws the
// token Sample draws for temperature-only settings from the same generator
// state (one Float64 each), on many rows and temperatures.
func TestSampleRowReferenceIsSample(t *testing.T) {
	gen := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		n := 1 + gen.IntN(3000)
		row := make([]float32, n)
		for i := range row {
			row[i] = float32(gen.NormFloat64() * 3)
		}
		if trial%7 == 0 {
			row[gen.IntN(n)] = float32(math.Inf(-1)) // an ordinary impossible token
		}
		temp := float32(0.2 + 2*gen.Float64())
		p := SampleParams{Temperature: temp}
		seed := gen.Uint64()
		want, err := Sample(row, p, rand.New(rand.NewPCG(seed, 9)))
		if err != nil {
			t.Fatal(err)
		}
		invT, u := DeviceDraw(p, rand.New(rand.NewPCG(seed, 9)))
		if got := SampleRowReference(row, invT, u); got != want {
			t.Fatalf("trial %d (n %d, temperature %v): reference drew %d, Sample %d", trial, n, temp, got, want)
		}
	}
}

func TestSampleRowReferenceNonFinite(t *testing.T) {
	inf := float32(math.Inf(1))
	for _, row := range [][]float32{
		{1, float32(math.NaN()), 2},
		{1, inf, 2},
		{-inf, -inf},
	} {
		if got := SampleRowReference(row, 1, 0.5); got != -1 {
			t.Errorf("row %v: drew %d, want -1", row, got)
		}
	}
}

// TestPickPlaceFor: greedy rows go to the device's argmax, temperature-only
// rows to its sampler, the rest (and invalid settings) to the host.
func TestPickPlaceFor(t *testing.T) {
	cpu := &CPUBackend{}
	dev := devicePicker{cpu}
	cases := []struct {
		p        SampleParams
		cpu, dev PickPlace
	}{
		{SampleParams{}, PickOnHost, PickArgmax},
		{SampleParams{Temperature: 0.7}, PickOnHost, PickSampleOnDevice},
		{SampleParams{Temperature: 0.7, TopP: 1}, PickOnHost, PickSampleOnDevice},
		{SampleParams{Temperature: 0.7, TopK: 100}, PickOnHost, PickSampleOnDevice}, // ≥ V: no cut
		{SampleParams{Temperature: 0.7, TopK: 20}, PickOnHost, PickOnHost},
		{SampleParams{Temperature: 0.7, TopP: 0.9}, PickOnHost, PickOnHost},
		{SampleParams{Temperature: float32(math.NaN())}, PickOnHost, PickOnHost},
		{SampleParams{Temperature: 1e-45}, PickOnHost, PickOnHost}, // 1/T overflows float32
	}
	for _, c := range cases {
		if got := PickPlaceFor(cpu, c.p, 100); got != c.cpu {
			t.Errorf("%+v on the CPU: %v, want %v", c.p, got, c.cpu)
		}
		if got := PickPlaceFor(dev, c.p, 100); got != c.dev {
			t.Errorf("%+v on a sampling device: %v, want %v", c.p, got, c.dev)
		}
	}
}

// devicePicker is a backend with Argmaxer and DeviceSampler (their results
// are not used here).
type devicePicker struct{ *CPUBackend }

func (devicePicker) ArgmaxRows([]int32, *runtime.Tensor) error                       { return nil }
func (devicePicker) SampleRows([]int32, *runtime.Tensor, []float32, []float32) error { return nil }
