package decoder

import (
	"errors"
	"fmt"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// The fused expert path. A forward of a few tokens (a decode step, a small
// batch) runs an expert block as four device ops and no host round trip:
// the router's MatMul, kernels.MoEFused's MoERoute (the top-k on the
// device), MoEGateUp (every routed expert's gate·up·SiLU in one launch) and
// MoEDown (their down projections and the weighted sum in one launch), the
// experts' weights found through a per-block table of where they are,
// rebuilt when the tree's weights are rebound (nn.Tree.BindGeneration). So a
// whole decode step of an MoE model can be captured as one graph. It runs
// when the backend has MoEFused, no hook watches the experts
// (nn.Unwatched: a hook that does sees each expert's forward on the
// per-expert path, after nn.Announce), no expert projection is FP8, the
// backend's table takes the weights, and T ≤ Model.MoEFusedTokens.
//
// A block that holds only some of the experts (a shard of a model sharded
// by experts, shard.go) never runs fused: its forwards route on the host
// and run the routed experts it holds one by one (so a sharded MoE model's
// decode step is not captured as one graph). Restricting the table and the
// kernels to the held experts (routed ids outside them contributing zero)
// would lift this.

// DefaultMoEFusedTokens is the most tokens a forward runs an expert block
// through the fused ops for when Model.MoEFusedTokens is 0: with more, each
// routed expert's weights are read once per token slot (from L2 after the
// first), and the per-expert path's GEMMs win.
const DefaultMoEFusedTokens = 16

// moeTable is an expert block's table of weight locations on one backend.
type moeTable struct {
	b   kernels.Backend
	tab kernels.ExpertTable
	gen uint64 // the BindGeneration the table was set at
	ok  bool   // the table took the weights (else the block runs per expert)
}

// fusedTokens is the most tokens the fused path takes (0: never).
func (m *Model) fusedTokens() int {
	switch {
	case m.MoEFusedTokens < 0:
		return 0
	case m.MoEFusedTokens == 0:
		return DefaultMoEFusedTokens
	}
	return m.MoEFusedTokens
}

// fused returns b's MoEFused and true when a forward of T tokens may run
// the block through it (see the comment above), preparing the block's
// table for the tree's current weights.
func (p *MoEBlock) fused(b kernels.Backend, m *Model, T int) (kernels.MoEFused, bool, error) {
	if T > m.fusedTokens() || p.First != 0 || len(p.Experts) != m.Cfg.MoE.Experts {
		return nil, false, nil
	}
	f, ok := kernels.MoEFusedOf(b)
	if !ok {
		return nil, false, nil
	}
	if p.mods == nil {
		p.mods = make([]nn.Module, len(p.Experts))
		for e, x := range p.Experts {
			p.mods[e] = x
		}
	}
	if !nn.Unwatched(p.mods...) {
		return nil, false, nil
	}
	ok, err := p.prepare(b, f)
	return f, ok, err
}

// prepare sets the block's table on b for the weights bound now, unless it
// already holds them, and reports whether the fused ops take them.
func (p *MoEBlock) prepare(b kernels.Backend, f kernels.MoEFused) (bool, error) {
	gen := p.Node().Tree().BindGeneration()
	if p.table != nil && p.table.b == b && p.table.gen == gen {
		return p.table.ok, nil
	}
	if p.table != nil && p.table.b != b {
		err := p.table.tab.Close()
		p.table = nil
		if err != nil {
			return false, err
		}
	}
	if p.table == nil {
		tab, err := f.NewExpertTable(len(p.Experts))
		if err != nil {
			return false, fmt.Errorf("%s: %w", p.Node().Name(), err)
		}
		p.table = &moeTable{b: b, tab: tab, gen: ^uint64(0)} // no generation yet
	}
	t := p.table
	t.ok = false
	E := len(p.Experts)
	gate, up, down := make([]*runtime.Tensor, E), make([]*runtime.Tensor, E), make([]*runtime.Tensor, E)
	for e, x := range p.Experts {
		if !plain(x.Gate, x.Up, x.Down) {
			t.gen = gen // not fusable until the weights are bound again
			return false, nil
		}
		gate[e], up[e], down[e] = x.Gate.Weight.Tensor(), x.Up.Weight.Tensor(), x.Down.Weight.Tensor()
	}
	switch err := t.tab.Set(gate, up, down); {
	case errors.Is(err, kernels.ErrNotFusable):
		t.gen = gen
		return false, nil
	case err != nil:
		// Not remembered: the next forward tries again and reports again,
		// rather than quietly routing on the host from now on.
		return false, fmt.Errorf("%s: %w", p.Node().Name(), err)
	}
	t.gen, t.ok = gen, true
	return true, nil
}

// forwardFused is the block's forward through f: out[T,D] (F32) from h[T,D].
func (p *MoEBlock) forwardFused(b kernels.Backend, f kernels.MoEFused, m *Model, w *workspace, out, h *runtime.Tensor) error {
	T, K := h.Dim(0), p.TopK
	s, err := m.moeFor(b, w)
	if err != nil {
		return err
	}
	if err := m.moeFusedFor(b, w, s); err != nil {
		return err
	}
	logits := rows(s.logits, T)
	if err := p.Router.Forward(b, logits, h); err != nil {
		return err
	}
	ids, wts := rows(s.ids, T), rows(s.wts, T) // [T,K]
	if ids.Dim(1) != K {
		return fmt.Errorf("%s: %d experts per token, the workspace routes %d", p.Node().Name(), K, ids.Dim(1))
	}
	if err := f.MoERoute(ids, wts, logits, p.NormTopK); err != nil {
		return fmt.Errorf("%s: %w", p.Node().Name(), err)
	}
	act := rows(s.act, T*K)
	if err := f.MoEGateUp(act, h, ids, p.table.tab); err != nil {
		return fmt.Errorf("%s: %w", p.Node().Name(), err)
	}
	if err := f.MoEDown(out, act, ids, wts, p.table.tab); err != nil {
		return fmt.Errorf("%s: %w", p.Node().Name(), err)
	}
	return nil
}

// moeFusedFor adds the fused path's scratch to s (held by w): routed ids
// and weights and the routed experts' activations for up to
// min(cap, fusedTokens) tokens.
func (m *Model) moeFusedFor(b kernels.Backend, w *workspace, s *moeScratch) error {
	if s.ids != nil {
		return nil
	}
	c := m.Cfg
	n, K := min(w.cap, m.fusedTokens()), c.MoE.TopK
	for _, a := range []struct {
		dst   **runtime.Tensor
		dt    runtime.DType
		label string
		shape []int
	}{{&s.ids, runtime.I32, "routed experts", []int{n, K}}, {&s.wts, runtime.F32, "routing weights", []int{n, K}},
		{&s.act, b.ActDType(), "routed expert activations", []int{n * K, c.MoE.IntermediateSize}}} {
		t, err := runtime.NewTensor(b.Device(), a.dt, a.shape, "activations "+a.label)
		if err != nil {
			return err
		}
		w.bufs = append(w.bufs, t.Buffer())
		*a.dst = t
	}
	return nil
}

// hostRouted reports whether a one-token forward of m on b would route
// some expert block on the host (the per-expert path, which reads the
// routing back and so cannot be captured in a graph), preparing the fused
// path's tables otherwise, outside any capture.
func (m *Model) hostRouted(b kernels.Backend) (bool, error) {
	for _, l := range m.Layers {
		if l.MoE == nil {
			continue
		}
		_, ok, err := l.MoE.fused(b, m, 1)
		if err != nil || !ok {
			return true, err
		}
	}
	return false, nil
}

// closeMoETables frees the expert blocks' tables.
func (m *Model) closeMoETables() {
	for _, l := range m.Layers {
		if l.MoE != nil && l.MoE.table != nil {
			l.MoE.table.tab.Close()
			l.MoE.table = nil
		}
	}
}
