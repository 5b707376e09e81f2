package decoder_test

import (
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/runtime"
)

// l2Event is one op the prefetcher saw: a prefetch, a product (MatMul or
// MatMulAdd) or an RMSNorm, with the weight it used.
type l2Event struct {
	op    string // "pf", "mm", "norm"
	w     *runtime.Tensor
	bytes int64 // of a prefetch
}

// prefetcher gives the CPU backend (with MatMulAdder) kernels.L2Prefetcher
// with the given plan, logging prefetches, products and norms in order.
type prefetcher struct {
	adder
	plan kernels.L2PrefetchPlan
	log  []l2Event
}

func (p *prefetcher) L2Prefetch() kernels.L2PrefetchPlan { return p.plan }

func (p *prefetcher) PrefetchL2(t *runtime.Tensor, n int64) error {
	if err := kernels.CheckPrefetchL2(p.Device(), t, n); err != nil {
		return err
	}
	p.log = append(p.log, l2Event{"pf", t, n})
	return nil
}

func (p *prefetcher) MatMul(out, x, w *runtime.Tensor) error {
	p.log = append(p.log, l2Event{op: "mm", w: w})
	return p.adder.MatMul(out, x, w)
}

func (p *prefetcher) MatMulAdd(y, x, w *runtime.Tensor) error {
	p.log = append(p.log, l2Event{op: "mm", w: w})
	return p.adder.MatMulAdd(y, x, w)
}

func (p *prefetcher) RMSNorm(out, x, w *runtime.Tensor, eps float32) error {
	p.log = append(p.log, l2Event{op: "norm", w: w})
	return p.adder.RMSNorm(out, x, w, eps)
}

var _ kernels.L2Prefetcher = (*prefetcher)(nil)

// prefetches are the prefetch events of log.
func prefetches(log []l2Event) []l2Event {
	var out []l2Event
	for _, e := range log {
		if e.op == "pf" {
			out = append(out, e)
		}
	}
	return out
}

// next is the first event after log[i] with op, or a zero event.
func next(log []l2Event, i int, op string) l2Event {
	for _, e := range log[i+1:] {
		if e.op == op {
			return e
		}
	}
	return l2Event{}
}

// TestL2PrefetchHook: with plan "o" each layer of every one-token step
// (none of the prefill's) prefetches all of its o_proj weight after its
// q/k/v products and right before the o_proj product; with "all" it also
// prefetches q, k and v whole (the tiny model's are far under the 16 MiB
// budget) before the input norm, and the logits are those of the backend
// without the op. With the plan off, for a batched forward, and for a layer
// a hook watches (as the offload engine watches the layers it runs) nothing
// is prefetched.
func TestL2PrefetchHook(t *testing.T) {
	m, b, _ := loadTiny(t)
	prompt, ids := []int32{5, 17, 42, 3}, []int32{7, 8, 9}
	run := func(be kernels.Backend) [][]float32 {
		cache, err := m.NewKVCache(be, 16)
		if err != nil {
			t.Fatal(err)
		}
		defer cache.Free()
		return steps(t, m, be, cache, prompt, ids)
	}
	want := run(&adder{Backend: b})
	same := func(what string, got [][]float32) {
		t.Helper()
		for i := range want {
			if !slices.Equal(want[i], got[i]) {
				t.Fatalf("%s: forward %d: logits differ from the backend without prefetches", what, i)
			}
		}
	}
	L := len(m.Layers)

	p := &prefetcher{adder: adder{Backend: b}}
	same("off", run(p))
	if n := len(prefetches(p.log)); n != 0 {
		t.Fatalf("plan off: %d prefetches", n)
	}

	for _, plan := range []kernels.L2PrefetchPlan{kernels.L2PrefetchO, kernels.L2PrefetchAll} {
		p = &prefetcher{adder: adder{Backend: b}, plan: plan}
		same(plan.String(), run(p))
		perLayer := 1
		if plan == kernels.L2PrefetchAll {
			perLayer = 4
		}
		if n := len(prefetches(p.log)); n != perLayer*L*len(ids) {
			t.Fatalf("plan %s: %d prefetches, want %d (%d a layer of each of %d steps, none in the prefill)", plan, n, perLayer*L*len(ids), perLayer, len(ids))
		}
		oCount := 0
		for i, e := range p.log {
			if e.op != "pf" {
				continue
			}
			if e.bytes != e.w.NumBytes() {
				t.Errorf("plan %s: prefetch of %d bytes of a weight of %d", plan, e.bytes, e.w.NumBytes())
			}
			var l *decoder.Layer
			for _, c := range m.Layers {
				a := c.Attn
				if e.w == a.O.Weight.Tensor() || e.w == a.Q.Weight.Tensor() || e.w == a.K.Weight.Tensor() || e.w == a.V.Weight.Tensor() {
					l = c
				}
			}
			if l == nil {
				t.Fatalf("plan %s: prefetch of a weight %v that is no layer's o, q, k or v", plan, e.w.Shape())
			}
			a := l.Attn
			switch e.w {
			case a.O.Weight.Tensor():
				oCount++
				if prev := p.log[i-1]; prev.op != "mm" || prev.w != a.V.Weight.Tensor() {
					t.Errorf("plan %s: %s's o_proj prefetch does not follow its v product (after %s %v)", plan, l.Node().Name(), prev.op, prev.w.Shape())
				}
				if nx := next(p.log, i, "mm"); nx.w != a.O.Weight.Tensor() {
					t.Errorf("plan %s: %s's o_proj prefetch is not followed by its o product", plan, l.Node().Name())
				}
			case a.Q.Weight.Tensor():
				if plan != kernels.L2PrefetchAll {
					t.Errorf("plan %s prefetches q", plan)
				}
				if nx := next(p.log, i, "norm"); nx.w != l.InputNorm.Weight.Tensor() {
					t.Errorf("plan %s: %s's q prefetch does not precede its input norm", plan, l.Node().Name())
				}
				if p.log[i+1].w != a.K.Weight.Tensor() || p.log[i+2].w != a.V.Weight.Tensor() {
					t.Errorf("plan %s: %s's q prefetch is not followed by k's and v's", plan, l.Node().Name())
				}
			}
		}
		if oCount != L*len(ids) {
			t.Errorf("plan %s: %d o_proj prefetches, want %d", plan, oCount, L*len(ids))
		}
	}

	// A hook watching layer 0 (the offload engine watches the layers it
	// runs): that layer prefetches nothing, the others still do.
	remove := m.Tree().AddHook(watchModule{m: m.Layers[0]})
	p = &prefetcher{adder: adder{Backend: b}, plan: kernels.L2PrefetchAll}
	got := run(p)
	remove()
	same("layer 0 watched", got)
	for _, e := range prefetches(p.log) {
		a := m.Layers[0].Attn
		if e.w == a.O.Weight.Tensor() || e.w == a.Q.Weight.Tensor() || e.w == a.K.Weight.Tensor() || e.w == a.V.Weight.Tensor() {
			t.Fatal("layer 0 watched: it still prefetches")
		}
	}
	if n := len(prefetches(p.log)); n != 4*(L-1)*len(ids) {
		t.Fatalf("layer 0 watched: %d prefetches, want %d", n, 4*(L-1)*len(ids))
	}
}

// TestL2PrefetchNotInBatches: a batched forward (decode steps of several
// sequences, one token each) prefetches nothing even with plan "all".
func TestL2PrefetchNotInBatches(t *testing.T) {
	m, b, _ := loadTiny(t)
	p := &prefetcher{adder: adder{Backend: b}, plan: kernels.L2PrefetchAll}
	cache, err := m.NewPagedCache(p, 16, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	s1, s2 := cache.NewSeq(), cache.NewSeq()
	if _, err := m.ForwardBatch(p, cache, []decoder.BatchEntry{{Seq: s1, IDs: []int32{5, 6, 7}}, {Seq: s2, IDs: []int32{1, 2}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ForwardBatch(p, cache, []decoder.BatchEntry{{Seq: s1, IDs: []int32{9}}, {Seq: s2, IDs: []int32{4}}}); err != nil {
		t.Fatal(err)
	}
	if n := len(prefetches(p.log)); n != 0 {
		t.Fatalf("batched forwards: %d prefetches", n)
	}
	if s1.Len() != 4 || s2.Len() != 3 {
		t.Fatalf("lengths %d, %d after the forwards; want 4, 3", s1.Len(), s2.Len())
	}
}
