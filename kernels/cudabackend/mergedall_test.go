//go:build cuda

package cudabackend

import (
	"math"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestMergedAllTokensGPU: with MergedAll (FT_MERGED_GEMM=all) the backend
// asks for both merges at every token count, and calls of more than 256
// tokens (q/k/v at 600 tokens, gate/up at 1,000) match the separate GEMMs
// and the CPU reference within mergedTol; with "gateup" only gate/up is
// asked for. Where the scratch would take more than half the memory left
// (a device limit just above what is in use) the call is not taken and
// writes nothing, without error.
func TestMergedAllTokensGPU(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	defer func(m MergedAllMode) { gb.MergedAll = m }(gb.MergedAll)
	gb.MergedAll = MergedAllGateUp
	if !gb.MergesAllTokens(true) || gb.MergesAllTokens(false) {
		t.Errorf("gateup: MergesAllTokens(gate/up) %v, (q/k/v) %v", gb.MergesAllTokens(true), gb.MergesAllTokens(false))
	}
	gb.MergedAll = MergedAll
	if !gb.MergesAllTokens(true) || !gb.MergesAllTokens(false) {
		t.Errorf("all: MergesAllTokens(gate/up) %v, (q/k/v) %v", gb.MergesAllTokens(true), gb.MergesAllTokens(false))
	}

	const T, D = 600, 256
	ns := []int{256, 64, 64}
	x := randBF16(rng, T*D, 1)
	wv := randBF16(rng, 384*D, float32(1/math.Sqrt(D)))
	gx := gpu(t, runtime.BF16, x, T, D)
	ws := packedWeights(t, wv, ns, D)
	var outs []*runtime.Tensor
	for _, n := range ns {
		outs = append(outs, poisoned(t, runtime.BF16, T, n))
	}
	if ran, err := gb.MatMulMerged(outs, gx, ws); err != nil || !ran {
		t.Fatalf("q/k/v at %d tokens: ran %v, error %v", T, ran, err)
	}
	row := 0
	for i, n := range ns {
		ref := host(t, runtime.F32, nil, T, n)
		if err := cb.MatMul(ref, host(t, runtime.F32, x, T, D), host(t, runtime.BF16, wv[row*D:(row+n)*D], n, D)); err != nil {
			t.Fatal(err)
		}
		row += n
		compare(t, "q/k/v output against the CPU", read(t, outs[i]), ref.F32(), mergedTol, mergedTol)
	}

	const T2, D2, I = 1000, 128, 384
	x2 := randBF16(rng, T2*D2, 1)
	wv2 := randBF16(rng, 2*I*D2, float32(2/math.Sqrt(D2)))
	gx2 := gpu(t, runtime.BF16, x2, T2, D2)
	gu := packedWeights(t, wv2, []int{I, I}, D2)
	out := poisoned(t, runtime.BF16, T2, I)
	if ran, err := gb.GateUpSiLUMerged(out, gx2, gu[0], gu[1]); err != nil || !ran {
		t.Fatalf("gate/up at %d tokens: ran %v, error %v", T2, ran, err)
	}
	hx := host(t, runtime.F32, x2, T2, D2)
	rg, ru := host(t, runtime.F32, nil, T2, I), host(t, runtime.F32, nil, T2, I)
	if err := cb.MatMul(rg, hx, host(t, runtime.BF16, wv2[:I*D2], I, D2)); err != nil {
		t.Fatal(err)
	}
	if err := cb.MatMul(ru, hx, host(t, runtime.BF16, wv2[I*D2:], I, D2)); err != nil {
		t.Fatal(err)
	}
	if err := cb.SiLUMul(rg, rg, ru); err != nil {
		t.Fatal(err)
	}
	compare(t, "gate/up against the CPU", read(t, out), rg.F32(), 2*mergedTol, mergedTol)

	// A fresh backend (no scratch yet) under a device limit 1 MiB above
	// what is in use: the 1.5 MiB scratch does not fit in half of it.
	fresh, err := New(gdev)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	fresh.MergedAll = MergedAll
	untouched := poisoned(t, runtime.BF16, T2, I)
	limit := gdev.Memory().Limit
	gdev.SetMemoryLimit(gdev.Memory().InUse + 1<<20)
	ran, err := fresh.GateUpSiLUMerged(untouched, gx2, gu[0], gu[1])
	gdev.SetMemoryLimit(limit)
	if ran || err != nil {
		t.Errorf("scratch without room: ran %v, error %v; want not taken", ran, err)
	}
	for i, v := range read(t, untouched) {
		if !math.IsNaN(float64(v)) {
			t.Fatalf("a call not taken wrote output element %d", i)
		}
	}
	if ran, err := fresh.GateUpSiLUMerged(untouched, gx2, gu[0], gu[1]); err != nil || !ran {
		t.Errorf("without the limit: ran %v, error %v", ran, err)
	}
}
