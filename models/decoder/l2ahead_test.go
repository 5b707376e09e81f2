package decoder_test

import (
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/runtime"
)

// aheadEvent is one op the aheader saw with the regions set at that time.
type aheadEvent struct {
	op string // "norm", "attn", "mm"
	w  *runtime.Tensor
	rs []kernels.L2Region
}

// aheader gives the CPU backend (with MatMulAdder) kernels.L2Aheader with
// the given budget, logging norms, attentions and products with the
// regions set when they ran.
type aheader struct {
	adder
	budget kernels.L2AheadBudget
	rs     []kernels.L2Region
	sets   int
	log    []aheadEvent
}

func (a *aheader) L2AheadBudget() kernels.L2AheadBudget { return a.budget }

func (a *aheader) SetL2Ahead(rs ...kernels.L2Region) error {
	if err := kernels.CheckL2Regions(a.Device(), rs); err != nil {
		return err
	}
	a.rs = slices.Clone(rs)
	a.sets++
	return nil
}

func (a *aheader) RMSNorm(out, x, w *runtime.Tensor, eps float32) error {
	a.log = append(a.log, aheadEvent{"norm", w, a.rs})
	return a.adder.RMSNorm(out, x, w, eps)
}

func (a *aheader) Attention(out, q, kc, vc *runtime.Tensor, pos0 int) error {
	a.log = append(a.log, aheadEvent{"attn", nil, a.rs})
	return a.adder.Attention(out, q, kc, vc, pos0)
}

func (a *aheader) MatMul(out, x, w *runtime.Tensor) error {
	a.log = append(a.log, aheadEvent{"mm", w, a.rs})
	return a.adder.MatMul(out, x, w)
}

func (a *aheader) MatMulAdd(y, x, w *runtime.Tensor) error {
	a.log = append(a.log, aheadEvent{"mm", w, a.rs})
	return a.adder.MatMulAdd(y, x, w)
}

var _ kernels.L2Aheader = (*aheader)(nil)

// TestL2AheadRegions: with a budget, in each layer of every one-token step
// (none of the prefill's) the input norm runs with the first bytes of q
// then k set (q whole, 256 bytes of k), decode attention with o_proj's
// first 896 bytes (a 1,000-byte budget in whole lines) and the
// post-attention norm with 256 bytes each of gate and up; no other op runs
// with a region set, and the logits are those of the backend without it.
// Off, batched, or for a layer a hook watches, no region is set.
func TestL2AheadRegions(t *testing.T) {
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
				t.Fatalf("%s: forward %d: logits differ from the backend without the prefetch", what, i)
			}
		}
	}
	a0 := m.Layers[0].Attn
	budget := kernels.L2AheadBudget{O: 1000, QKV: a0.Q.Weight.Tensor().NumBytes() + 256, MLP: 512}

	off := &aheader{adder: adder{Backend: b}}
	same("off", run(off))
	if off.sets != 0 {
		t.Fatalf("budget off: SetL2Ahead called %d times", off.sets)
	}

	p := &aheader{adder: adder{Backend: b}, budget: budget}
	same("on", run(p))
	L := len(m.Layers)
	counts := map[string]int{}
	for _, e := range p.log {
		if len(e.rs) == 0 {
			continue
		}
		var l *decoder.Layer
		var wantRS []kernels.L2Region
		switch e.op {
		case "norm":
			for _, c := range m.Layers {
				switch e.w {
				case c.InputNorm.Weight.Tensor():
					l, wantRS = c, []kernels.L2Region{{T: c.Attn.Q.Weight.Tensor(), Bytes: c.Attn.Q.Weight.Tensor().NumBytes()}, {T: c.Attn.K.Weight.Tensor(), Bytes: 256}}
					counts["qkv"]++
				case c.PostNorm.Weight.Tensor():
					l, wantRS = c, []kernels.L2Region{{T: c.MLP.Gate.Weight.Tensor(), Bytes: 256}, {T: c.MLP.Up.Weight.Tensor(), Bytes: 256}}
					counts["mlp"]++
				}
			}
		case "attn":
			for _, c := range m.Layers {
				if e.rs[0].T == c.Attn.O.Weight.Tensor() {
					l, wantRS = c, []kernels.L2Region{{T: c.Attn.O.Weight.Tensor(), Bytes: 896}}
				}
			}
			counts["o"]++
		default:
			t.Fatalf("a %s op ran with regions set", e.op)
		}
		if l == nil {
			t.Fatalf("%s with regions of no layer's weights", e.op)
		}
		if !slices.Equal(e.rs, wantRS) {
			t.Errorf("%s of %s: regions %+v, want %+v", e.op, l.Node().Name(), e.rs, wantRS)
		}
	}
	for _, k := range []string{"qkv", "mlp", "o"} {
		if counts[k] != L*len(ids) {
			t.Errorf("%s regions set %d times, want %d (once a layer of each one-token step)", k, counts[k], L*len(ids))
		}
	}

	remove := m.Tree().AddHook(watchModule{m: m.Layers[0]})
	p = &aheader{adder: adder{Backend: b}, budget: budget}
	got := run(p)
	remove()
	same("layer 0 watched", got)
	n := 0
	for _, e := range p.log {
		if len(e.rs) == 0 {
			continue
		}
		n++
		for _, r := range e.rs {
			for _, l := range []*runtime.Tensor{a0.Q.Weight.Tensor(), a0.O.Weight.Tensor(), m.Layers[0].MLP.Gate.Weight.Tensor()} {
				if r.T == l {
					t.Fatal("layer 0 watched: it still sets regions")
				}
			}
		}
	}
	if n != 3*(L-1)*len(ids) {
		t.Fatalf("layer 0 watched: %d ops with regions, want %d", n, 3*(L-1)*len(ids))
	}

	p = &aheader{adder: adder{Backend: b}, budget: budget}
	cache, err := m.NewPagedCache(p, 16, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	s1, s2 := cache.NewSeq(), cache.NewSeq()
	for _, step := range [][]decoder.BatchEntry{{{Seq: s1, IDs: []int32{5, 6}}, {Seq: s2, IDs: []int32{1}}}, {{Seq: s1, IDs: []int32{9}}, {Seq: s2, IDs: []int32{4}}}} {
		if _, err := m.ForwardBatch(p, cache, step); err != nil {
			t.Fatal(err)
		}
	}
	if p.sets != 0 {
		t.Fatalf("batched forwards: SetL2Ahead called %d times", p.sets)
	}
}
