package kernels

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestRoute: the top-k of the softmax by descending probability, ties to
// the lower expert index, renormalised or not; groups by ascending expert
// with their tokens in order; NaN logits still give k distinct experts.
func TestRoute(t *testing.T) {
	logits := []float32{
		0, 2, 1, 2, // token 0: experts 1 and 3 tie at the top → 1 then 3
		5, 5, 5, 5, // token 1: all equal → 0, 1
		-1, 0, 3, -9, // token 2: → 2, 1
	}
	var r Routing
	if err := r.Route(logits, 4, 2, false); err != nil {
		t.Fatal(err)
	}
	if want := []int32{1, 3, 0, 1, 2, 1}; !slices.Equal(r.Experts, want) {
		t.Fatalf("experts %v, want %v", r.Experts, want)
	}
	e0 := math.Exp(-2) + 1 + math.Exp(-1) + 1 // token 0's softmax denominator over exp(l−2)
	for i, w := range []float64{1 / e0, 1 / e0, 0.25, 0.25} {
		if math.Abs(float64(r.Weights[i])-w) > 1e-6 {
			t.Errorf("weight %d = %v, want %v", i, r.Weights[i], w)
		}
	}
	g := r.Groups()
	type grp struct {
		e    int
		rows []int32
	}
	var got []grp
	for _, x := range g {
		got = append(got, grp{x.Expert, slices.Clone(x.Rows)})
		if len(x.Weights) != len(x.Rows) {
			t.Errorf("expert %d: %d weights for %d rows", x.Expert, len(x.Weights), len(x.Rows))
		}
	}
	want := []grp{{0, []int32{1}}, {1, []int32{0, 1, 2}}, {2, []int32{2}}, {3, []int32{0}}}
	if len(got) != len(want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
	for i := range want {
		if got[i].e != want[i].e || !slices.Equal(got[i].rows, want[i].rows) {
			t.Errorf("group %d = %v, want %v", i, got[i], want[i])
		}
	}
	if err := r.Route(logits[:8], 4, 2, true); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i += 2 {
		if s := r.Weights[i] + r.Weights[i+1]; math.Abs(float64(s)-1) > 1e-6 || r.Weights[i] != r.Weights[i+1] {
			t.Errorf("token %d: renormalised weights %v", i/2, r.Weights[i:i+2])
		}
	}
	if err := r.Route([]float32{1, float32(math.NaN()), 2, 0}, 4, 3, true); err != nil {
		t.Fatal(err)
	}
	ex := slices.Clone(r.Experts)
	slices.Sort(ex)
	if len(slices.Compact(ex)) != 3 || ex[0] < 0 || ex[2] > 3 {
		t.Errorf("NaN logits: experts %v", r.Experts)
	}
	for _, c := range []struct {
		n, E, k int
		want    string
	}{{7, 4, 2, "not rows of 4"}, {8, 4, 5, "top 5 of 4"}, {8, 4, 0, "top 0"}, {8, 0, 1, "not rows of 0"}} {
		if err := r.Route(make([]float32, c.n), c.E, c.k, true); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d logits, E %d, k %d: error %v, want %q", c.n, c.E, c.k, err, c.want)
		}
	}
}

func f32Tensor(t *testing.T, dev runtime.Device, shape runtime.Shape, v []float32) *runtime.Tensor {
	t.Helper()
	x, err := runtime.NewTensor(dev, runtime.F32, shape, "test")
	if err != nil {
		t.Fatal(err)
	}
	copy(x.F32(), v)
	return x
}

// TestMoERowOps: GatherRows, ScatterAddRows and Zero on the CPU, and their
// errors for bad indices and shapes.
func TestMoERowOps(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	b, err := NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	var mk MoEKernels = b
	src := f32Tensor(t, dev, runtime.Shape{3, 2}, []float32{1, 2, 3, 4, 5, 6})
	dst := f32Tensor(t, dev, runtime.Shape{2, 2}, nil)
	if err := mk.GatherRows(dst, src, []int32{2, 0}); err != nil {
		t.Fatal(err)
	}
	if got := dst.F32(); !slices.Equal(got, []float32{5, 6, 1, 2}) {
		t.Errorf("gathered %v", got)
	}
	acc := f32Tensor(t, dev, runtime.Shape{3, 2}, []float32{1, 1, 1, 1, 1, 1})
	if err := mk.ScatterAddRows(acc, dst, []int32{1, 2}, []float32{0.5, -1}); err != nil {
		t.Fatal(err)
	}
	if got := acc.F32(); !slices.Equal(got, []float32{1, 1, 3.5, 4, 0, -1}) {
		t.Errorf("scatter-added %v", got)
	}
	if err := mk.Zero(acc); err != nil || slices.ContainsFunc(acc.F32(), func(v float32) bool { return v != 0 }) {
		t.Errorf("zeroed %v, %v", acc.F32(), err)
	}
	wide := f32Tensor(t, dev, runtime.Shape{2, 3}, nil)
	for name, err := range map[string]error{
		"outside":     mk.GatherRows(dst, src, []int32{3, 0}),
		"row indices": mk.GatherRows(dst, src, []int32{0}),
		"widths":      mk.GatherRows(wide, src, []int32{0, 1}),
		"weights":     mk.ScatterAddRows(acc, dst, []int32{0, 1}, []float32{1}),
		"negative":    mk.ScatterAddRows(acc, dst, []int32{-1, 1}, []float32{1, 1}),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := MoEOf(struct{ Backend }{b}); err == nil || !strings.Contains(err.Error(), "mixture of experts") {
		t.Errorf("a backend without MoEKernels: %v", err)
	}
}
