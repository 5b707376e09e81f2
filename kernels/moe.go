package kernels

import (
	"fmt"
	"math"

	"github.com/flextensor-go/flextensor/runtime"
)

// MoEKernels are the row ops a mixture-of-experts layer needs beyond the
// Backend's: an expert runs over the rows of the tokens routed to it, and
// its output rows are added back scaled by the routing weights. An optional
// capability (MoEOf).
type MoEKernels interface {
	// GatherRows: dst[i,:] = src[rows[i],:] for i < len(rows); dst and src
	// of the same dtype and row width.
	GatherRows(dst, src *runtime.Tensor, rows []int32) error
	// ScatterAddRows: dst[rows[i],:] += weights[i]·src[i,:] for i <
	// len(rows), dst and src F32 of the same row width. The rows are
	// distinct.
	ScatterAddRows(dst, src *runtime.Tensor, rows []int32, weights []float32) error
	// Zero: t[i] = 0.
	Zero(t *runtime.Tensor) error
}

// MoEOf returns b's MoEKernels, or an error saying that b has none.
func MoEOf(b Backend) (MoEKernels, error) {
	f, ok := b.(MoEKernels)
	if !ok {
		return nil, fmt.Errorf("kernels: backend %T on %s cannot run a mixture of experts (no MoEKernels)", b, b.Device().Name())
	}
	return f, nil
}

// Routing is the routing of one forward's T tokens to their top-k experts,
// reused across forwards (Route overwrites it).
type Routing struct {
	T, K    int
	Experts []int32   // [T·K]: token t's experts, by descending probability
	Weights []float32 // [T·K]: their routing weights
	groups  []ExpertRows
	rows    []int32
	weights []float32
	p       []float32
	count   []int
}

// ExpertRows is one expert's share of a forward: the rows (token indices,
// ascending) routed to it and their routing weights.
type ExpertRows struct {
	Expert  int
	Rows    []int32
	Weights []float32
}

// Route routes each of the T = len(logits)/E tokens from its router logits
// (row t of [T,E]): p = softmax(logits[t]) in F32, the k experts of largest
// p (ties go to the lower expert index, as torch.topk picks them), their
// weights p renormalised to sum 1 when renorm. A NaN probability never
// wins a comparison. Bad sizes are an error.
func (r *Routing) Route(logits []float32, E, k int, renorm bool) error {
	if E <= 0 || len(logits)%E != 0 {
		return fmt.Errorf("kernels.Route: %d logits are not rows of %d experts", len(logits), E)
	}
	if k < 1 || k > E {
		return fmt.Errorf("kernels.Route: top %d of %d experts", k, E)
	}
	T := len(logits) / E
	r.T, r.K = T, k
	r.Experts = grow(r.Experts, T*k)
	r.Weights = grow(r.Weights, T*k)
	r.p = grow(r.p, E)
	p := r.p
	for t := 0; t < T; t++ {
		row := logits[t*E : (t+1)*E]
		mx := float32(math.Inf(-1))
		for _, v := range row {
			if v > mx {
				mx = v
			}
		}
		var sum float32
		for e, v := range row {
			p[e] = float32(math.Exp(float64(v - mx)))
			sum += p[e]
		}
		for e := range p {
			p[e] /= sum
		}
		ex, wt := r.Experts[t*k:(t+1)*k], r.Weights[t*k:(t+1)*k]
		var top float32
		for j := 0; j < k; j++ {
			best := -1
			for e := 0; e < E; e++ {
				if chosen(ex[:j], e) {
					continue
				}
				if best < 0 || p[e] > p[best] {
					best = e
				}
			}
			ex[j], wt[j] = int32(best), p[best]
			top += p[best]
		}
		if renorm {
			for j := range wt {
				wt[j] /= top
			}
		}
	}
	return nil
}

func chosen(ex []int32, e int) bool {
	for _, x := range ex {
		if int(x) == e {
			return true
		}
	}
	return false
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// Groups lists, in ascending expert index, each expert that at least one
// token routes to, with its tokens' rows (ascending) and weights. The
// slices are the Routing's: valid until the next Route.
func (r *Routing) Groups() []ExpertRows {
	maxE := int32(-1)
	for _, e := range r.Experts[:r.T*r.K] {
		maxE = max(maxE, e)
	}
	r.count = grow(r.count, int(maxE)+1)
	count := r.count
	clear(count)
	for _, e := range r.Experts[:r.T*r.K] {
		count[e]++
	}
	r.groups = r.groups[:0]
	r.rows = grow(r.rows, r.T*r.K)
	r.weights = grow(r.weights, r.T*r.K)
	// A counting sort: each expert's group starts where the groups of the
	// lower experts end, and one pass over the tokens in order fills them,
	// so each group's rows come out ascending.
	off := 0
	for e := int32(0); e <= maxE; e++ {
		n := count[e]
		if n == 0 {
			continue
		}
		r.groups = append(r.groups, ExpertRows{Expert: int(e), Rows: r.rows[off : off : off+n], Weights: r.weights[off : off : off+n]})
		count[e] = len(r.groups) - 1 // from here on: the expert's group index
		off += n
	}
	for t := 0; t < r.T; t++ {
		for j := 0; j < r.K; j++ {
			g := &r.groups[count[r.Experts[t*r.K+j]]]
			g.Rows = append(g.Rows, int32(t))
			g.Weights = append(g.Weights, r.Weights[t*r.K+j])
		}
	}
	return r.groups
}

// rowsOf views t as rows of its last dimension's width.
func rowsOf(op, name string, t *runtime.Tensor) (int, int, error) {
	if len(t.Shape()) == 0 || t.Dim(-1) == 0 {
		return 0, 0, fmt.Errorf("kernels.%s: %s %v has no rows", op, name, t.Shape())
	}
	w := t.Dim(-1)
	return t.NumElements() / w, w, nil
}

// checkRows checks that rows index R rows and that there are n of them.
func checkRows(op string, rows []int32, R, n int) error {
	if len(rows) != n {
		return fmt.Errorf("kernels.%s: %d row indices for %d rows", op, len(rows), n)
	}
	for i, r := range rows {
		if r < 0 || int(r) >= R {
			return fmt.Errorf("kernels.%s: row index %d at %d is outside 0..%d", op, r, i, R-1)
		}
	}
	return nil
}

// GatherRows: dst[i,:] = src[rows[i],:] (MoEKernels) for F32 rows.
func (b *CPUBackend) GatherRows(dst, src *runtime.Tensor, rows []int32) error {
	R, W, err := rowsOf("GatherRows", "src", src)
	if err != nil {
		return err
	}
	n, Wd, err := rowsOf("GatherRows", "dst", dst)
	if err != nil {
		return err
	}
	if Wd != W {
		return fmt.Errorf("kernels.GatherRows: dst %v and src %v have rows of different widths", dst.Shape(), src.Shape())
	}
	if err := checkRows("GatherRows", rows, R, n); err != nil {
		return err
	}
	sv, err := f32("GatherRows src", src)
	if err != nil {
		return err
	}
	dv, err := f32("GatherRows dst", dst)
	if err != nil {
		return err
	}
	for i, r := range rows {
		copy(dv[i*W:(i+1)*W], sv[int(r)*W:(int(r)+1)*W])
	}
	return nil
}

// ScatterAddRows: dst[rows[i],:] += weights[i]·src[i,:] (MoEKernels).
func (b *CPUBackend) ScatterAddRows(dst, src *runtime.Tensor, rows []int32, weights []float32) error {
	R, W, err := rowsOf("ScatterAddRows", "dst", dst)
	if err != nil {
		return err
	}
	n, Ws, err := rowsOf("ScatterAddRows", "src", src)
	if err != nil {
		return err
	}
	if Ws != W {
		return fmt.Errorf("kernels.ScatterAddRows: dst %v and src %v have rows of different widths", dst.Shape(), src.Shape())
	}
	if err := checkRows("ScatterAddRows", rows, R, n); err != nil {
		return err
	}
	if len(weights) != n {
		return fmt.Errorf("kernels.ScatterAddRows: %d weights for %d rows", len(weights), n)
	}
	sv, err := f32("ScatterAddRows src", src)
	if err != nil {
		return err
	}
	dv, err := f32("ScatterAddRows dst", dst)
	if err != nil {
		return err
	}
	for i, r := range rows {
		d, s, w := dv[int(r)*W:(int(r)+1)*W], sv[i*W:(i+1)*W], weights[i]
		for j, v := range s {
			d[j] += w * v
		}
	}
	return nil
}

// Zero: t[i] = 0 (MoEKernels) for F32 t.
func (b *CPUBackend) Zero(t *runtime.Tensor) error {
	v, err := f32("Zero", t)
	if err != nil {
		return err
	}
	clear(v)
	return nil
}
