//go:build cuda

package llama

import (
	"math"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/kernels/cudabackend"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// TestDependentLaunchDecodeCUDA: decode steps with programmatic dependent
// launch (sm_90) give exactly the logits of steps without it, eagerly and
// replayed from a graph captured with it; on a GPU without it the three
// runs are all plain launches and must agree all the same.
func TestDependentLaunchDecodeCUDA(t *testing.T) {
	ref := readReference(t)
	m, b := loadTinyCUDA(t, tinyDir)
	dev := b.(*cudabackend.Backend).Device().(*cuda.Device)
	defer dev.SetDependentLaunch(true)
	t.Logf("dependent launch available: %v", dev.SetDependentLaunch(true))
	prompt := ref.InputIDs[0]
	caches := make([]*KVCache, 3) // eager without, eager with, graph with
	for i, pdl := range []bool{false, true, true} {
		dev.SetDependentLaunch(pdl)
		c, err := m.NewKVCache(b, len(prompt)+16)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Free()
		if _, err := m.Forward(b, c, prompt, false); err != nil {
			t.Fatal(err)
		}
		caches[i] = c
	}
	dev.SetDependentLaunch(true)
	g, err := m.CaptureDecode(b, caches[2])
	if err != nil {
		t.Fatalf("capturing the step with dependent launch: %v", err)
	}
	defer g.Close()
	V := m.Cfg.VocabSize
	off, on, replay := make([]float32, V), make([]float32, V), make([]float32, V)
	diff := func(a, b []float32) float64 {
		worst := 0.0
		for j := range a {
			worst = math.Max(worst, math.Abs(float64(a[j]-b[j])))
		}
		return worst
	}
	for i, id := range ref.GreedyContinuation[:12] {
		for _, run := range []struct {
			pdl bool
			c   *KVCache
			out []float32
		}{{false, caches[0], off}, {true, caches[1], on}} {
			dev.SetDependentLaunch(run.pdl)
			lt, err := m.Forward(b, run.c, []int32{id}, false)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.ReadF32(run.out, lt); err != nil {
				t.Fatal(err)
			}
		}
		lg, err := g.Step(id)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.ReadF32(replay, lg); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(off, on) {
			t.Fatalf("step %d: eager logits with dependent launch differ from those without by up to %.3g", i, diff(off, on))
		}
		if !slices.Equal(on, replay) {
			t.Fatalf("step %d: graph logits with dependent launch differ from eager ones by up to %.3g", i, diff(on, replay))
		}
	}
}

// TestResidualAccumulateCUDA: o_proj and down_proj adding into the residual
// stream (kernels.MatMulAdder) against the product-then-add path: a
// prefill's logits (cuBLAS with beta 1) within rounding, and decode steps
// from the same cache bit for bit (the accumulating GEMV adds exactly as
// the add did), eagerly and from a captured graph.
func TestResidualAccumulateCUDA(t *testing.T) {
	ref := readReference(t)
	m, b := loadTinyCUDA(t, tinyDir)
	defer func() { m.NoResidualAccumulate = false }()
	prompt := ref.InputIDs[0]
	V := m.Cfg.VocabSize
	pre := make([][]float32, 2)
	caches := make([]*KVCache, 3) // without, with, graph with
	for i := range caches {
		m.NoResidualAccumulate = i == 0
		c, err := m.NewKVCache(b, len(prompt)+16)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Free()
		m.NoResidualAccumulate = true // the same cache contents for the steps
		lt, err := m.Forward(b, c, prompt, false)
		if err != nil {
			t.Fatal(err)
		}
		caches[i] = c
		if i < 2 {
			// and the prefill logits of each path, from a cache of its own
			m.NoResidualAccumulate = i == 0
			c2, err := m.NewKVCache(b, len(prompt))
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Free()
			if lt, err = m.Forward(b, c2, prompt, false); err != nil {
				t.Fatal(err)
			}
			pre[i] = make([]float32, V)
			if err := b.ReadF32(pre[i], lt); err != nil {
				t.Fatal(err)
			}
		}
	}
	worst := 0.0
	for j := range pre[0] {
		worst = math.Max(worst, math.Abs(float64(pre[0][j]-pre[1][j])))
	}
	if worst > 2e-2 {
		t.Fatalf("prefill logits with the residual accumulated differ by up to %.3g", worst)
	}
	m.NoResidualAccumulate = false
	g, err := m.CaptureDecode(b, caches[2])
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	off, on, replay := make([]float32, V), make([]float32, V), make([]float32, V)
	for i, id := range ref.GreedyContinuation[:8] {
		for _, run := range []struct {
			noAcc bool
			c     *KVCache
			out   []float32
		}{{true, caches[0], off}, {false, caches[1], on}} {
			m.NoResidualAccumulate = run.noAcc
			lt, err := m.Forward(b, run.c, []int32{id}, false)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.ReadF32(run.out, lt); err != nil {
				t.Fatal(err)
			}
		}
		m.NoResidualAccumulate = false
		lg, err := g.Step(id)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.ReadF32(replay, lg); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(off, on) || !slices.Equal(on, replay) {
			t.Fatalf("step %d: decode logits with the residual accumulated differ (eager %v, graph %v)", i, slices.Equal(off, on), slices.Equal(on, replay))
		}
	}
}
