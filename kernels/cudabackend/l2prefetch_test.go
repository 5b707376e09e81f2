//go:build cuda

package cudabackend

import (
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestPrefetchL2GPU: l2_prefetch_weights over views at odd offsets and of
// odd sizes (not multiples of 16 bytes nor of the 16 KiB chunk; a few
// bytes; several MiB; the whole buffer) and of 0 bytes runs without a
// fault and leaves the memory as it was; bad operands are refused with an
// error. Then the PDL chain through it: y = (a+b) + c with the prefetch
// launched between the two F32 adds (the second reads what the first
// wrote), eagerly and replayed from a captured graph, 20 times each, equals
// the host sums.
func TestPrefetchL2GPU(t *testing.T) {
	needGPU(t)
	rng := newRNG(t)
	const n = 3<<20 + 37 // bf16 values: 6 MiB + 74 bytes
	vals := randBF16(rng, n, 1)
	all := gpu(t, runtime.BF16, vals, n)
	for _, c := range []struct {
		off   int64 // bytes from the buffer's start
		elems int   // bf16 values in the view
		bytes int64 // prefetched; -1: the whole view
	}{
		{0, n, -1}, {0, n, 0}, {2, 1, -1}, {1, 7, -1}, {6, 8191, -1}, {30, 8193, -1},
		{14, 1 << 20, 123457}, {1, 3 << 20, -1}, {64, 9, 15}, {2*n - 2, 1, -1},
	} {
		v, err := runtime.TensorOn(all.Buffer(), all.Offset()+c.off, runtime.BF16, runtime.Shape{c.elems})
		if err != nil {
			t.Fatal(err)
		}
		bytes := c.bytes
		if bytes < 0 {
			bytes = v.NumBytes()
		}
		if err := gb.PrefetchL2(v, bytes); err != nil {
			t.Fatalf("offset %d, %d values, %d bytes: %v", c.off, c.elems, bytes, err)
		}
		if err := gb.s.Synchronize(); err != nil {
			t.Fatalf("offset %d, %d values, %d bytes: %v", c.off, c.elems, bytes, err)
		}
	}
	if got := read(t, all); !slices.Equal(got, vals) {
		t.Fatal("the prefetches changed the memory")
	}
	for _, bad := range []struct {
		what  string
		t     *runtime.Tensor
		bytes int64
	}{{"negative bytes", all, -1}, {"past the end", all, all.NumBytes() + 1}, {"a host tensor", host(t, runtime.BF16, vals[:8], 8), 2}, {"no tensor", nil, 0}} {
		if err := gb.PrefetchL2(bad.t, bad.bytes); err == nil {
			t.Errorf("%s: no error", bad.what)
		}
	}

	const m = 1 << 22 // F32 values: 16 MiB a vector
	av, bv, cv := randBF16(rng, m, 1), randBF16(rng, m, 1), randBF16(rng, m, 1)
	a, b, c := gpu(t, runtime.F32, av, m), gpu(t, runtime.F32, bv, m), gpu(t, runtime.F32, cv, m)
	x, y := gpu(t, runtime.F32, nil, m), gpu(t, runtime.F32, nil, m)
	want := make([]float32, m)
	for i := range want {
		want[i] = (av[i] + bv[i]) + cv[i]
	}
	chain := func() error {
		if err := gb.Add(x, a, b); err != nil {
			return err
		}
		if err := gb.PrefetchL2(all, all.NumBytes()); err != nil {
			return err
		}
		return gb.Add(y, x, c)
	}
	check := func(what string, i int) {
		t.Helper()
		if got := read(t, y); !slices.Equal(got, want) {
			t.Fatalf("%s, run %d: (a+b)+c with a prefetch between the adds differs from the host sums", what, i)
		}
	}
	zero := make([]float32, m)
	for i := 0; i < 20; i++ {
		if err := gb.WriteBytes(y, f32Bytes(zero)); err != nil {
			t.Fatal(err)
		}
		if err := gb.WriteBytes(x, f32Bytes(zero)); err != nil {
			t.Fatal(err)
		}
		if err := chain(); err != nil {
			t.Fatal(err)
		}
		check("eager", i)
	}
	g, err := gb.CaptureStep(chain)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for i := 0; i < 20; i++ {
		if err := gb.WriteBytes(y, f32Bytes(zero)); err != nil {
			t.Fatal(err)
		}
		if err := gb.WriteBytes(x, f32Bytes(zero)); err != nil {
			t.Fatal(err)
		}
		if err := g.Replay(); err != nil {
			t.Fatal(err)
		}
		check("graph", i)
	}
}
