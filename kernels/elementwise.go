package kernels

import (
	"fmt"
	"math"
)

// SiLUMul computes out[i] = gate[i]·σ(gate[i])·up[i] with σ(g) = 1/(1+e^−g)
// (Llama's MLP activation). out may alias gate or up; it panics if the
// lengths differ.
func SiLUMul(out, gate, up []float32) {
	if len(gate) != len(out) || len(up) != len(out) {
		panic(fmt.Sprintf("kernels.SiLUMul: out, gate, up have %d, %d, %d values, want equal lengths", len(out), len(gate), len(up)))
	}
	if !splits(len(out), convGrain/8) {
		siluMul(out, gate, up)
		return
	}
	parallelFor(len(out), convGrain/8, func(_, lo, hi int) { siluMul(out[lo:hi], gate[lo:hi], up[lo:hi]) })
}

func siluMul(out, gate, up []float32) {
	gate, up = gate[:len(out)], up[:len(out)]
	for i, g := range gate {
		out[i] = g / (1 + float32(math.Exp(float64(-g)))) * up[i]
	}
}

// Add computes out[i] = a[i] + b[i]. out may alias a or b; it panics if the
// lengths differ.
func Add(out, a, b []float32) {
	if len(a) != len(out) || len(b) != len(out) {
		panic(fmt.Sprintf("kernels.Add: out, a, b have %d, %d, %d values, want equal lengths", len(out), len(a), len(b)))
	}
	if !splits(len(out), convGrain) {
		add(out, a, b)
		return
	}
	parallelFor(len(out), convGrain, func(_, lo, hi int) { add(out[lo:hi], a[lo:hi], b[lo:hi]) })
}

func add(out, a, b []float32) {
	a, b = a[:len(out)], b[:len(out)]
	for i := range out {
		out[i] = a[i] + b[i]
	}
}

// Embedding gathers rows: out[t,c] = float32(table[ids[t],c]) for
// t < len(ids), c < table.Cols. An id outside [0, table.Rows) is an error
// naming the id, its position and the vocabulary size.
func Embedding(out []float32, table Mat, ids []int32) error {
	if err := table.Validate(); err != nil {
		return fmt.Errorf("kernels.Embedding: table: %w", err)
	}
	dim := table.Cols
	if len(out) != len(ids)*dim {
		return fmt.Errorf("kernels.Embedding: out has %d values, want len(ids)*dim = %d*%d = %d", len(out), len(ids), dim, len(ids)*dim)
	}
	for t, id := range ids {
		if id < 0 || int(id) >= table.Rows {
			return fmt.Errorf("kernels.Embedding: id %d at position %d is outside the vocabulary [0,%d)", id, t, table.Rows)
		}
	}
	grain := max(1, convGrain/max(dim, 1))
	if !splits(len(ids), grain) {
		embedRows(out, table, ids)
		return nil
	}
	parallelFor(len(ids), grain, func(_, lo, hi int) { embedRows(out[lo*dim:hi*dim], table, ids[lo:hi]) })
	return nil
}

func embedRows(out []float32, table Mat, ids []int32) {
	dim := table.Cols
	for t, id := range ids {
		table.widenRows(out[t*dim:(t+1)*dim], int(id), int(id)+1)
	}
}
