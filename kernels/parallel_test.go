package kernels

import (
	"math/rand/v2"
	goruntime "runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

func TestParallelFor(t *testing.T) {
	for _, c := range []struct{ n, grain int }{{0, 1}, {1, 1}, {5, 10}, {100, 1}, {1000, 7}, {12345, 100}} {
		hits := make([]atomic.Int32, c.n)
		var bad atomic.Bool
		parallelFor(c.n, c.grain, func(w, lo, hi int) {
			if w < 0 || w >= workers() || lo >= hi || (hi-lo < c.grain && hi != c.n) {
				bad.Store(true)
			}
			for i := lo; i < hi; i++ {
				hits[i].Add(1)
			}
		})
		if bad.Load() {
			t.Errorf("n %d grain %d: a range or worker id out of bounds", c.n, c.grain)
		}
		for i := range hits {
			if h := hits[i].Load(); h != 1 {
				t.Fatalf("n %d grain %d: index %d visited %d times", c.n, c.grain, i, h)
			}
		}
	}
}

// Nested and concurrent calls must neither deadlock nor lose work.
func TestParallelForNestedConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	var total atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				parallelFor(64, 1, func(_, lo, hi int) {
					for range hi - lo {
						parallelFor(100, 3, func(_, lo, hi int) { total.Add(int64(hi - lo)) })
					}
				})
			}
		}()
	}
	wg.Wait()
	if got, want := total.Load(), int64(4*20*64*100); got != want {
		t.Fatalf("visited %d indices, want %d", got, want)
	}
}

// The kernels compute every output the same way whatever range it falls
// in, so results are bitwise identical on one goroutine and on many.
func TestResultsIndependentOfCores(t *testing.T) {
	if workers() < 2 {
		t.Skip("one core")
	}
	r := rand.New(rand.NewPCG(19, 19))
	w := randMat(r, runtime.BF16, 600, 200) // large enough for every kernel to split
	x := randF32(r, 700*200)
	nw := randMat(r, runtime.F16, 1, 200)
	q, kc, vc := randF32(r, 20*8*32), randF32(r, 64*2*32), randF32(r, 64*2*32)
	run := func() [][]float32 {
		mm := make([]float32, 33*600)
		gv := make([]float32, 600)
		nm := make([]float32, len(x))
		at := make([]float32, len(q))
		if MatMul(mm, x[:33*200], 33, w) != nil || MatMul(gv, x[:200], 1, w) != nil ||
			RMSNorm(nm, x, 700, nw, 1e-6) != nil || Attention(at, q, kc, vc, 20, 30, 8, 2, 32, nil) != nil {
			t.Fatal("kernel error")
		}
		return [][]float32{mm, gv, nm, at}
	}
	many := run()
	prev := goruntime.GOMAXPROCS(1)
	one := run()
	goruntime.GOMAXPROCS(prev)
	for i := range many {
		if !slices.Equal(many[i], one[i]) {
			t.Errorf("output %d differs between 1 and %d goroutines", i, prev)
		}
	}
}
