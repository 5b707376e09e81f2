package host

import (
	"math/rand/v2"
	"testing"
)

func TestReadSum(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, e := range engines(t) {
		for _, n := range []int{0, 1, 15, 63, 64, 65, 1000, readChunk + 7, 3*readChunk + 100} {
			v := make([]float32, n)
			var want float64
			for i := range v {
				v[i] = float32(r.IntN(17) - 8) // small integers: every order sums exactly
				want += float64(v[i])
			}
			if got := e.ReadSum(v); float64(got) != want {
				t.Fatalf("%v/%d threads: ReadSum of %d values = %v, want %v", e.Level(), e.Threads(), n, got, want)
			}
		}
	}
}

func TestReadBandwidth(t *testing.T) {
	e, err := NewEngine(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	gbs, err := e.ReadBandwidth(1<<20, 2)
	if err != nil || !(gbs > 0) {
		t.Fatalf("ReadBandwidth = %v, %v", gbs, err)
	}
	if _, err := e.ReadBandwidth(0, 1); err == nil {
		t.Error("0 bytes: no error")
	}
}
