package decoder_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/runtime"
)

// brancher gives the CPU backend (with MatMulAdder) kernels.L2Brancher
// with the given plan, logging forks, joins, products and norms in order
// by the name of the weight they use ("L0.q", "L0.in", ...), as the CUDA
// backend's branch stream would see them: a join is logged only when a
// fork is pending.
type brancher struct {
	adder
	plan    kernels.L2BranchPlan
	names   map[*runtime.Tensor]string
	log     []string
	pending bool
}

func (p *brancher) L2Branch() kernels.L2BranchPlan { return p.plan }

func (p *brancher) ForkL2Prefetch(rs []kernels.L2Region) error {
	if err := kernels.CheckL2Regions(p.Device(), rs); err != nil {
		return err
	}
	var s []string
	for _, r := range rs {
		s = append(s, fmt.Sprintf("%s:%d", p.names[r.T], r.Bytes))
	}
	p.log = append(p.log, "fork "+strings.Join(s, ","))
	p.pending = true
	return nil
}

func (p *brancher) JoinL2Prefetch() error {
	if p.pending {
		p.log = append(p.log, "join")
		p.pending = false
	}
	return nil
}

func (p *brancher) MatMul(out, x, w *runtime.Tensor) error {
	if n, ok := p.names[w]; ok {
		p.log = append(p.log, "mm "+n)
	}
	return p.adder.MatMul(out, x, w)
}

func (p *brancher) MatMulAdd(y, x, w *runtime.Tensor) error {
	if n, ok := p.names[w]; ok {
		p.log = append(p.log, "mm "+n)
	}
	return p.adder.MatMulAdd(y, x, w)
}

func (p *brancher) RMSNorm(out, x, w *runtime.Tensor, eps float32) error {
	if n, ok := p.names[w]; ok {
		p.log = append(p.log, "norm "+n)
	}
	return p.adder.RMSNorm(out, x, w, eps)
}

var _ kernels.L2Brancher = (*brancher)(nil)

// layerNames names the weights of m's layers for brancher's log.
func layerNames(m *decoder.Model) map[*runtime.Tensor]string {
	names := map[*runtime.Tensor]string{}
	for i, l := range m.Layers {
		a := l.Attn
		for n, t := range map[string]*runtime.Tensor{"q": a.Q.Weight.Tensor(), "k": a.K.Weight.Tensor(), "v": a.V.Weight.Tensor(),
			"o": a.O.Weight.Tensor(), "in": l.InputNorm.Weight.Tensor(), "post": l.PostNorm.Weight.Tensor(),
			"gate": l.MLP.Gate.Weight.Tensor(), "up": l.MLP.Up.Weight.Tensor(), "down": l.MLP.Down.Weight.Tensor()} {
			names[t] = fmt.Sprintf("L%d.%s", i, n)
		}
	}
	return names
}

// TestL2BranchHook: with FT_L2_BRANCH's plan "all" each layer of every
// one-token step (none of the prefill's) forks the q/k/v prefetch before
// its input norm, o_proj's after the v product (before RoPE and attention)
// and gate·up's after the o product (before the post-attention norm), each
// within its cap (q/k/v a prefix in order, gate and up an even split), and
// joins once after its down product; the logits are those of the backend
// without the branch. With the plan off, or "o" alone, only those forks;
// a layer a hook watches forks nothing.
func TestL2BranchHook(t *testing.T) {
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
	names := layerNames(m)
	L := len(m.Layers)
	a0, mlp0 := m.Layers[0].Attn, m.Layers[0].MLP
	qB, kB, oB, gB := a0.Q.Weight.Tensor().NumBytes(), a0.K.Weight.Tensor().NumBytes(), a0.O.Weight.Tensor().NumBytes(), mlp0.Gate.Weight.Tensor().NumBytes()
	// Caps: q/k/v's ends inside k, o's covers all of o, gate·up's splits.
	qkvCap, guCap := qB+kB/2, gB/2
	plan := func(kinds string) kernels.L2BranchPlan {
		p, err := kernels.ParseL2Branch(kinds, "", "", "")
		if err != nil {
			t.Fatal(err)
		}
		p.O, p.QKV, p.GU = 1<<30, qkvCap, guCap
		return p
	}
	// expect is one step's log for the kinds forked.
	expect := func(kinds kernels.L2BranchKind, skip int) []string {
		var s []string
		for i := range L {
			n := func(w string) string { return fmt.Sprintf("L%d.%s", i, w) }
			on := func(k kernels.L2BranchKind) bool { return kinds&k != 0 && i != skip }
			if on(kernels.L2BranchQKV) {
				s = append(s, fmt.Sprintf("fork %s:%d,%s:%d", n("q"), qB, n("k"), kB/2))
			}
			s = append(s, "norm "+n("in"), "mm "+n("q"), "mm "+n("k"), "mm "+n("v"))
			if on(kernels.L2BranchO) {
				s = append(s, fmt.Sprintf("fork %s:%d", n("o"), oB))
			}
			s = append(s, "mm "+n("o"))
			if on(kernels.L2BranchGU) {
				s = append(s, fmt.Sprintf("fork %s:%d,%s:%d", n("gate"), guCap/2, n("up"), guCap/2))
			}
			s = append(s, "norm "+n("post"), "mm "+n("gate"), "mm "+n("up"), "mm "+n("down"))
			if kinds != 0 && i != skip {
				s = append(s, "join")
			}
		}
		return s
	}
	prefill := expect(0, -1)
	for _, c := range []struct {
		kinds string
		want  kernels.L2BranchKind
	}{{"0", 0}, {"o", kernels.L2BranchO}, {"all", kernels.L2BranchO | kernels.L2BranchQKV | kernels.L2BranchGU}} {
		p := &brancher{adder: adder{Backend: b}, plan: plan(c.kinds), names: names}
		got := run(p)
		for i := range want {
			if !slices.Equal(want[i], got[i]) {
				t.Fatalf("plan %s: forward %d: logits differ from the backend without the branch", c.kinds, i)
			}
		}
		wantLog := slices.Clone(prefill)
		for range ids {
			wantLog = append(wantLog, expect(c.want, -1)...)
		}
		if !slices.Equal(p.log, wantLog) {
			t.Errorf("plan %s: log\n%s\nwant\n%s", c.kinds, strings.Join(p.log, "\n"), strings.Join(wantLog, "\n"))
		}
	}

	// A hook watching layer 0 (the offload engine watches the layers it
	// runs): that layer forks nothing, the others still do.
	remove := m.Tree().AddHook(watchModule{m: m.Layers[0]})
	p := &brancher{adder: adder{Backend: b}, plan: plan("all"), names: names}
	run(p)
	remove()
	wantLog := slices.Clone(prefill)
	for range ids {
		wantLog = append(wantLog, expect(kernels.L2BranchO|kernels.L2BranchQKV|kernels.L2BranchGU, 0)...)
	}
	if !slices.Equal(p.log, wantLog) {
		t.Errorf("layer 0 watched: log\n%s\nwant\n%s", strings.Join(p.log, "\n"), strings.Join(wantLog, "\n"))
	}
}
