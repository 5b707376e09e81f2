package all_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/runtime"
)

// productRowsCPU is the CPU backend recording how many rows each weight's
// products take, call by call; with add, it also adds products into the
// residual stream (kernels.MatMulAdder, as a GPU backend does: the
// layers' o_proj and down_proj then write into the stream's rows).
type productRowsCPU struct {
	*kernels.CPUBackend
	rows map[*runtime.Tensor][]int
}

func (b *productRowsCPU) MatMul(out, x, w *runtime.Tensor) error {
	b.rows[w] = append(b.rows[w], x.Dim(0))
	return b.CPUBackend.MatMul(out, x, w)
}

type addingRowsCPU struct{ *productRowsCPU }

func (b addingRowsCPU) MatMulAdd(y, x, w *runtime.Tensor) error {
	p, err := runtime.NewTensor(b.Device(), runtime.F32, y.Shape(), "test product")
	if err != nil {
		return err
	}
	defer p.Buffer().Free()
	if err := b.MatMul(p, x, w); err != nil {
		return err
	}
	return b.Add(y, y, p)
}

// MatMulAddNorm records the product's rows for the CPU backend's fused
// one-row add and norm (kernels.MatMulAddNormer), which a one-row o_proj
// or down_proj takes.
func (b addingRowsCPU) MatMulAddNorm(y, x, w, out, nw *runtime.Tensor, eps float32) (bool, error) {
	b.rows[w] = append(b.rows[w], x.Dim(0))
	return b.CPUBackend.MatMulAddNorm(y, x, w, out, nw, eps)
}

// eachFamilyAdding runs f for every family of batchFixtures on a fresh CPU
// device, with backends that write o_proj's and down_proj's products into
// a scratch (add false: the CPU backend's path) and that add them into the
// residual stream (add true: a GPU backend's path); the subtests are
// named family and family/accumulating.
func eachFamilyAdding(t *testing.T, f func(t *testing.T, m *decoder.Model, b *kernels.CPUBackend, add bool)) {
	for _, fx := range batchFixtures {
		for _, add := range []bool{false, true} {
			name := fx.family
			if add {
				name += "/accumulating"
			}
			t.Run(name, func(t *testing.T) {
				dev, b := cpu(t)
				f(t, load(t, fx.dir, dev), b.(*kernels.CPUBackend), add)
			})
		}
	}
}

// rowsBackend is b recording its products' rows, adding them into the
// residual stream with add; the record is the second result's rows.
func rowsBackend(b *kernels.CPUBackend, add bool) (kernels.Backend, *productRowsCPU) {
	rb := &productRowsCPU{CPUBackend: b, rows: map[*runtime.Tensor][]int{}}
	if add {
		return addingRowsCPU{rb}, rb
	}
	return rb, rb
}

// sameBits fails t unless got and want hold the same float32 bits.
func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d logits, %d with the full last layer", what, len(got), len(want))
	}
	for j := range want {
		if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
			t.Fatalf("%s logit %d: %v, %v with the full last layer", what, j, got[j], want[j])
		}
	}
}

// rowCheck is a product whose first call must have taken want rows: the
// weight w in a record of rows (productRowsCPU.rows).
type rowCheck struct {
	what string
	rows map[*runtime.Tensor][]int
	w    *runtime.Tensor
	want int
}

// checkRows reports each check whose first call took other rows than it
// wants (when names that call).
func checkRows(t *testing.T, when string, cs []rowCheck) {
	t.Helper()
	for _, c := range cs {
		if r := c.rows[c.w]; len(r) == 0 || r[0] != c.want {
			t.Errorf("%s: %s's product took rows %v (one entry a call), want %d first", c.what, when, r, c.want)
		}
	}
}

// TestBatchLastLayerRows: a batched forward runs its last layer on only
// the rows whose logits it returns past its keys and values — the first
// step of the plans packs 39 prompt rows for 4 sequences, and the last
// layer's k_proj and v_proj take 39 rows, its q_proj, o_proj and down_proj
// 4 (their queries attend alone, as decode steps; under FT_LAST_LAYER=
// attend-all its q_proj 39, o_proj 4), while every other layer's take 39 —
// and gives the logits of the full last layer (FullLastLayer) bit for bit
// at every step (the later steps read every layer's cached keys and
// values, the last layer's included), with o_proj and down_proj writing a
// scratch (the CPU backend) and adding into the residual stream.
func TestBatchLastLayerRows(t *testing.T) {
	eachFamilyAdding(t, func(t *testing.T, m *decoder.Model, b *kernels.CPUBackend, add bool) {
		ps := plans(m.Cfg.VocabSize)
		run := func(full bool) ([][][]float32, map[*runtime.Tensor][]int) {
			m.FullLastLayer = full
			defer func() { m.FullLastLayer = false }()
			be, rb := rowsBackend(b, add)
			cache, err := m.NewPagedCache(be, 64, 4)
			if err != nil {
				t.Fatal(err)
			}
			defer cache.Close()
			got := runBatched(t, m, be, cache, ps)
			if cache.FreeBlocks() != cache.TotalBlocks() {
				t.Errorf("full %v: %d of %d blocks free after the run", full, cache.FreeBlocks(), cache.TotalBlocks())
			}
			return got, rb.rows
		}
		want, fullRows := run(true)
		got, rows := run(false)
		t.Setenv("FT_LAST_LAYER", "attend-all") // every row's queries, the rest on the kept rows
		gotAll, allRows := run(false)
		t.Setenv("FT_LAST_LAYER", "")
		for _, c := range []struct {
			what string
			got  [][][]float32
		}{{"", got}, {"attend-all: ", gotAll}} {
			for i := range want {
				if len(c.got[i]) != len(want[i]) {
					t.Fatalf("%ssequence %d: %d forwards, %d with the full last layer", c.what, i, len(c.got[i]), len(want[i]))
				}
				for s := range want[i] {
					sameBits(t, fmt.Sprintf("%ssequence %d forward %d", c.what, i, s), c.got[i][s], want[i][s])
				}
			}
		}
		prompt := 0
		for _, p := range ps {
			if p.join == 0 {
				prompt += len(p.prompt)
			}
		}
		first, last := m.Layers[0], m.Layers[len(m.Layers)-1]
		checkRows(t, "the first step", []rowCheck{
			{"layer 0's o_proj", rows, first.Attn.O.Weight.Tensor(), prompt},
			{"layer 0's down_proj", rows, first.MLP.Down.Weight.Tensor(), prompt},
			{"the last layer's k_proj", rows, last.Attn.K.Weight.Tensor(), prompt},
			{"the last layer's v_proj", rows, last.Attn.V.Weight.Tensor(), prompt},
			{"the last layer's q_proj", rows, last.Attn.Q.Weight.Tensor(), 4},
			{"the last layer's o_proj", rows, last.Attn.O.Weight.Tensor(), 4},
			{"the last layer's down_proj", rows, last.MLP.Down.Weight.Tensor(), 4},
			{"the full last layer's down_proj", fullRows, last.MLP.Down.Weight.Tensor(), prompt},
			{"attend-all: the last layer's q_proj", allRows, last.Attn.Q.Weight.Tensor(), prompt},
			{"attend-all: the last layer's o_proj", allRows, last.Attn.O.Weight.Tensor(), 4},
		})
	})
}

// TestBatchLastLayerRowsEveryDevice: on every device (the GPU's GEMMs of
// 4 rows may round otherwise than those of 39, its one-row products are
// GEMVs), the batched plans with the last layer past attention on the
// returned rows alone, and a 23-token prompt and its greedy steps through
// Forward with it on the last row alone, choose the greedy tokens of the
// full last layer (FullLastLayer) at every step, their logits within 2% of
// the row's largest magnitude.
func TestBatchLastLayerRowsEveryDevice(t *testing.T) {
	devtest.Each(t, func(t *testing.T, d devtest.Device) {
		for _, fx := range batchFixtures {
			t.Run(fx.family, func(t *testing.T) {
				m := load(t, fx.dir, d.Dev)
				ps := plans(m.Cfg.VocabSize)
				run := func(full bool) [][][]float32 {
					m.FullLastLayer = full
					defer func() { m.FullLastLayer = false }()
					cache, err := m.NewPagedCache(d.Backend, 64, 4)
					if err != nil {
						t.Fatal(err)
					}
					defer cache.Close()
					return runBatched(t, m, d.Backend, cache, ps)
				}
				want, got := run(true), run(false)
				// and one sequence alone through Forward (the last row past attention)
				prompt := planPrompt(23, 1, m.Cfg.VocabSize)
				m.FullLastLayer = true
				alone := testmodel.Run(t, m, d.Backend, prompt, 4)
				m.FullLastLayer = false
				want, got = append(want, alone), append(got, testmodel.Run(t, m, d.Backend, prompt, 4))
				for i := range want {
					if len(got[i]) != len(want[i]) {
						t.Fatalf("sequence %d: %d forwards, %d with the full last layer", i, len(got[i]), len(want[i]))
					}
					for s := range want[i] {
						var top float64
						for _, v := range want[i][s] {
							top = max(top, math.Abs(float64(v)))
						}
						if diff := maxDiff(got[i][s], want[i][s]); diff > 0.02*top {
							t.Errorf("sequence %d forward %d: logits differ by %.3g from the full last layer's (largest magnitude %.3g)", i, s, diff, top)
						}
						if g, w := kernels.Argmax(got[i][s]), kernels.Argmax(want[i][s]); g != w {
							t.Errorf("sequence %d forward %d: greedy token %d, %d with the full last layer", i, s, g, w)
						}
					}
				}
			})
		}
	})
}

// TestForwardLastRow: Forward without allLogits runs its last layer past
// attention on the last row alone — the last layer's o_proj and down_proj
// take 1 row of a 23-token prompt, every other layer's 23 — for every
// family, with o_proj and down_proj writing a scratch and adding into the
// residual stream, and gives bit for bit the logits of the full last layer
// (FullLastLayer) at the prompt and at every greedy step after it (which
// read the last layer's cached keys and values), and the last row of
// Forward with allLogits.
func TestForwardLastRow(t *testing.T) {
	eachFamilyAdding(t, func(t *testing.T, m *decoder.Model, b *kernels.CPUBackend, add bool) {
		prompt := planPrompt(23, 1, m.Cfg.VocabSize)
		run := func(full bool) ([][]float32, map[*runtime.Tensor][]int) {
			m.FullLastLayer = full
			defer func() { m.FullLastLayer = false }()
			be, rb := rowsBackend(b, add)
			return testmodel.Run(t, m, be, prompt, 4), rb.rows
		}
		want, fullRows := run(true)
		got, rows := run(false)
		for s := range want {
			sameBits(t, fmt.Sprintf("forward %d", s), got[s], want[s])
		}
		cache, err := m.NewKVCache(b, len(prompt))
		if err != nil {
			t.Fatal(err)
		}
		defer cache.Free()
		all, err := m.Forward(b, cache, prompt, true)
		if err != nil {
			t.Fatal(err)
		}
		V := m.Cfg.VocabSize
		allRows := make([]float32, all.NumElements())
		if err := b.ReadF32(allRows, all); err != nil {
			t.Fatal(err)
		}
		sameBits(t, "the prompt against the last row of all logits", got[0], allRows[(len(prompt)-1)*V:])
		first, last := m.Layers[0], m.Layers[len(m.Layers)-1]
		checkRows(t, "the prompt", []rowCheck{
			{"layer 0's down_proj", rows, first.MLP.Down.Weight.Tensor(), len(prompt)},
			{"the last layer's k_proj", rows, last.Attn.K.Weight.Tensor(), len(prompt)},
			{"the last layer's o_proj", rows, last.Attn.O.Weight.Tensor(), 1},
			{"the last layer's down_proj", rows, last.MLP.Down.Weight.Tensor(), 1},
			{"the full last layer's down_proj", fullRows, last.MLP.Down.Weight.Tensor(), len(prompt)},
		})
	})
}
