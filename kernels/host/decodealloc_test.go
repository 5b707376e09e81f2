package host

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestDecodeLayerAllocs: once warm, a DecodeLayer call (one pool job of
// five phases) allocates at most the two small objects of the job itself
// (RunPhases' job and the pool's hand-off, fresh per job so that a helper
// looking in late cannot mistake it for the next), whether attention runs
// unsplit (short context) or split (flash-decoding, long context): the
// phases' closures, segments, attention partials and the stage clock are
// kept by the backend from call to call. Before, a call made ~26 objects
// (~3 KB), which a host stretch of 19 layers turned into GC pressure.
func TestDecodeLayerAllocs(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	hb, err := New(dev, Options{Threads: 3, FusedLayer: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer hb.Close()
	if hb.Engine().Level() == Generic {
		t.Skip("no SIMD level on this CPU: DecodeLayer declines")
	}
	r := rand.New(rand.NewPCG(7, 9))
	const D, I, H, KV, d = 64, 96, 4, 2, 16
	for _, pos := range []int{9, 250} {
		t.Run(fmt.Sprintf("pos-%d", pos), func(t *testing.T) {
			C := pos + 2
			w := func(n, k int) *runtime.Tensor {
				v := randF32(r, n*k)
				for i := range v {
					v[i] /= float32(math.Sqrt(float64(k)))
				}
				return tensorOf(t, dev, runtime.BF16, v, n, k)
			}
			f32 := func(v []float32, shape ...int) *runtime.Tensor { return tensorOf(t, dev, runtime.F32, v, shape...) }
			zeros := func(shape ...int) *runtime.Tensor {
				n := 1
				for _, s := range shape {
					n *= s
				}
				return f32(make([]float32, n), shape...)
			}
			inv := make([]float32, d/2)
			for i := range inv {
				inv[i] = float32(math.Pow(10000, -2*float64(i)/float64(d)))
			}
			a := kernels.DecodeLayer{X: f32(randF32(r, D), 1, D), InNorm: tensorOf(t, dev, runtime.BF16, randF32(r, D), D), PostNorm: tensorOf(t, dev, runtime.BF16, randF32(r, D), D),
				InEps: 1e-5, PostEps: 1e-5,
				WQ: w(H*d, D), WK: w(KV*d, D), WV: w(KV*d, D), WO: w(D, H*d), WGate: w(I, D), WUp: w(I, D), WDown: w(D, I),
				KCache: f32(randF32(r, C*KV*d), C, KV, d), VCache: f32(randF32(r, C*KV*d), C, KV, d),
				Pos: pos, InvFreq: inv,
				H: zeros(1, D), Q: zeros(1, H, d), K: zeros(1, KV, d), V: zeros(1, KV, d), Att: zeros(1, H, d), Gate: zeros(1, I)}
			if S := hb.e.attnSplits(KV, pos+1); (S > 1) != (pos > 100) {
				t.Fatalf("attention splits %d at position %d: the case does not test what it says", S, pos)
			}
			var runErr error
			allocs := testing.AllocsPerRun(50, func() {
				ran, err := hb.DecodeLayer(a)
				if err == nil && !ran {
					err = fmt.Errorf("DecodeLayer declined")
				}
				if err != nil {
					runErr = err
				}
			})
			if runErr != nil {
				t.Fatal(runErr)
			}
			t.Logf("%.1f allocations a call", allocs)
			limit := 2.0
			if raceEnabled {
				// The race detector makes sync.Pool drop a share of
				// its Puts: the norms' scratch (kernels.getF32) is
				// then made anew.
				limit++
			}
			if allocs > limit {
				t.Fatalf("DecodeLayer made %.1f allocations a call, want at most %g (the pool job)", allocs, limit)
			}
			x := a.X.F32()
			for _, v := range x {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("residual went non-finite: %v", v)
				}
			}
		})
	}
}
