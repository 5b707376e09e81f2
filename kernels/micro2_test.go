package kernels

import (
	"fmt"
	"math/rand/v2"
	goruntime "runtime"
	"syscall"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

func threadCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(1, &ru) // RUSAGE_THREAD
	return float64(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuRate runs f n times on a locked thread and returns ops per CPU-ns.
func cpuRate(n int, ops float64, f func()) float64 {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	best := 0.0
	for range 5 {
		t0 := threadCPU()
		for range n {
			f()
		}
		if r := ops * float64(n) / (threadCPU() - t0); r > best {
			best = r
		}
	}
	return best
}

func TestMicroCPU(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const k = 4096
	x := randF32(r, k)
	h := make([]uint16, 4*k)
	for i := range h {
		h[i] = runtime.F32ToBF16(r.Float32()*2 - 1)
	}
	buf := make([]float32, 4*k)
	w := randF32(r, 4*k)
	res := map[string]float64{}
	res["fused_bf16_1x4"] = cpuRate(3000, 4*k, func() {
		a, c, d, e := dot1x4bf(x, h[:k], h[k:2*k], h[2*k:3*k], h[3*k:])
		sinkF += a + c + d + e
	})
	res["widen_then_1x4"] = cpuRate(3000, 4*k, func() {
		widenBF16(buf, h)
		a, c, d, e := dot1x4(x, buf[:k], buf[k:2*k], buf[2*k:3*k], buf[3*k:])
		sinkF += a + c + d + e
	})
	res["widen_chunk512"] = cpuRate(3000, 4*k, func() {
		const kc = 512
		var a, c, d, e float32
		for k0 := 0; k0 < k; k0 += kc {
			for r := range 4 {
				widenBF16(buf[r*kc:(r+1)*kc], h[r*k+k0:r*k+k0+kc])
			}
			a1, c1, d1, e1 := dot1x4(x[k0:k0+kc], buf[:kc], buf[kc:2*kc], buf[2*kc:3*kc], buf[3*kc:4*kc])
			a, c, d, e = a+a1, c+c1, d+d1, e+e1
		}
		sinkF += a + c + d + e
	})
	res["f32_1x4"] = cpuRate(3000, 4*k, func() {
		a, c, d, e := dot1x4(x, w[:k], w[k:2*k], w[2*k:3*k], w[3*k:])
		sinkF += a + c + d + e
	})
	res["f32_dot"] = cpuRate(3000, 4*k, func() {
		sinkF += dot(x, w[:k]) + dot(x, w[k:2*k]) + dot(x, w[2*k:3*k]) + dot(x, w[3*k:])
	})
	res["widen_only"] = cpuRate(3000, 4*k, func() { widenBF16(buf, h) })
	for name, v := range res {
		fmt.Printf("%-16s %.2f G/s\n", name, v)
	}
}
