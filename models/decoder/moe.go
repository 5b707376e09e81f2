package decoder

import (
	"fmt"
	"slices"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// Mixture of experts (Mixtral, Qwen3-MoE). A sparse layer replaces the MLP
// with a router and E experts, each a gated MLP of inner width I_e:
//
//	p[t] = softmax(router(h[t]))            over the E experts, in F32
//	S[t] = the TopK experts of largest p[t] (ties: the lower index)
//	w[t,e] = p[t,e] / Σ_{e'∈S[t]} p[t,e']   (renormalised; else w = p)
//	out[t] = Σ_{e∈S[t]} w[t,e] · expert_e(h[t])
//
// Shapes, with E experts and I_e = MoE.IntermediateSize: the router is
// [E, D]; each expert's gate and up are [I_e, D], its down [D, I_e].

// MoE is a config's mixture-of-experts knobs; Experts 0 is a dense model.
type MoE struct {
	Experts          int  // E: "num_local_experts" or "num_experts"; 0 = dense
	TopK             int  // "num_experts_per_tok": experts each token routes to, 1..E
	IntermediateSize int  // I_e, each expert's inner width ("moe_intermediate_size"; Mixtral: intermediate_size)
	NormTopK         bool // renormalise the TopK weights to sum 1 (Mixtral always; Qwen3-MoE "norm_topk_prob")
	// SparseStep ("decoder_sparse_step", default 1): layer i is sparse when
	// (i+1) % SparseStep == 0 and i is not in DenseLayers.
	SparseStep  int
	DenseLayers []int // "mlp_only_layers": layers with a dense MLP of intermediate_size
	// Owned is the experts [lo, hi) a shard of the model holds
	// (ShardPlan.Experts); the zero value means all E. The router keeps
	// all E outputs either way: every shard routes alike.
	Owned [2]int
}

// OwnedRange is the experts [lo, hi) a model of these knobs holds: Owned,
// or all E when Owned is the zero value.
func (m MoE) OwnedRange() (lo, hi int) {
	if m.Owned == [2]int{} {
		return 0, m.Experts
	}
	return m.Owned[0], m.Owned[1]
}

// Enabled reports whether the config has experts.
func (m MoE) Enabled() bool { return m.Experts > 0 }

// Sparse reports whether layer i routes to experts (else it has a dense MLP).
func (m MoE) Sparse(i int) bool {
	if !m.Enabled() || slices.Contains(m.DenseLayers, i) {
		return false
	}
	return m.SparseStep <= 1 || (i+1)%m.SparseStep == 0
}

// validate checks the knobs against a model of layers layers.
func (m MoE) validate(layers int) error {
	if !m.Enabled() {
		if m.Experts < 0 {
			return fmt.Errorf("decoder config: %d experts is negative", m.Experts)
		}
		return nil
	}
	switch {
	case m.TopK < 1 || m.TopK > m.Experts:
		return fmt.Errorf("decoder config: %d experts per token with %d experts: want 1..%d", m.TopK, m.Experts, m.Experts)
	case m.IntermediateSize <= 0:
		return fmt.Errorf("decoder config: expert intermediate size must be positive, got %d", m.IntermediateSize)
	case m.SparseStep < 0:
		return fmt.Errorf("decoder config: decoder sparse step %d is negative", m.SparseStep)
	case m.Owned != [2]int{} && (m.Owned[0] < 0 || m.Owned[0] >= m.Owned[1] || m.Owned[1] > m.Experts):
		return fmt.Errorf("decoder config: owned experts [%d,%d) are not a non-empty range of the %d experts", m.Owned[0], m.Owned[1], m.Experts)
	}
	for _, l := range m.DenseLayers {
		if l < 0 || l >= layers {
			return fmt.Errorf("decoder config: dense (mlp-only) layer %d is outside 0..%d", l, layers-1)
		}
	}
	return nil
}

// MoENames places a sparse layer's modules: Block inside the layer
// ("block_sparse_moe", "mlp"), Router and Experts inside the block ("gate",
// "experts"), and each expert's projections inside "<Experts>.<e>" (Gate,
// Up, Down: "w1", "w3", "w2" or "gate_proj", "up_proj", "down_proj").
type MoENames struct {
	Block, Router, Experts string
	Gate, Up, Down         string
}

// MoEFields says how a family's config.json spells its experts, for
// ReadMoE and MoEJSON.
type MoEFields struct {
	// ExpertKeys are the keys of the expert count, in order of preference
	// (["num_local_experts", "num_experts"]); those present must agree, and
	// ConfigJSON writes the first.
	ExpertKeys     []string
	DefaultExperts int // when no key is present
	DefaultTopK    int // "num_experts_per_tok" absent
	// WidthKey is the key of the experts' inner width ("moe_intermediate_size");
	// "" means intermediate_size (Mixtral).
	WidthKey     string
	DefaultWidth int
	// NormKey is the key of the renormalisation flag ("norm_topk_prob",
	// default false); "" means always renormalised (Mixtral).
	NormKey string
	// Layout: decoder_sparse_step and mlp_only_layers are read (Qwen3-MoE);
	// else every layer is sparse.
	Layout bool
}

// ReadMoE reads a family's expert fields into c.MoE with the transformers
// defaults fs gives, and checks them (Config.Validate checks again).
// router_aux_loss_coef, output_router_logits and router_jitter_noise are
// training knobs and are ignored. Errors name the field.
func ReadMoE(r *loader.Fields, c *Config, fs MoEFields) error {
	m := MoE{Experts: fs.DefaultExperts, SparseStep: 1, NormTopK: fs.NormKey == ""}
	key := ""
	for _, k := range fs.ExpertKeys {
		if !r.Present(k) {
			continue
		}
		n := r.Positive(k, fs.DefaultExperts)
		if key != "" && n != m.Experts && r.Err() == nil {
			r.Fail(r.Errorf(k, "%d disagrees with %s %d", n, key, m.Experts))
		}
		if key == "" {
			key, m.Experts = k, n
		}
	}
	if key == "" && len(fs.ExpertKeys) > 0 {
		key = fs.ExpertKeys[0]
	}
	m.TopK = r.Positive("num_experts_per_tok", fs.DefaultTopK)
	m.IntermediateSize = c.IntermediateSize
	if fs.WidthKey != "" {
		m.IntermediateSize = r.Positive(fs.WidthKey, fs.DefaultWidth)
	}
	if fs.NormKey != "" {
		m.NormTopK = r.Bool(fs.NormKey, false)
	}
	if fs.Layout {
		m.SparseStep = r.Positive("decoder_sparse_step", 1)
		if d := r.Ints("mlp_only_layers"); len(d) > 0 {
			m.DenseLayers = d
		}
	}
	if err := r.Err(); err != nil {
		return err
	}
	switch {
	case m.TopK > m.Experts:
		return r.Errorf("num_experts_per_tok", "%d exceeds the %d experts (%s)", m.TopK, m.Experts, key)
	}
	for _, l := range m.DenseLayers {
		if l < 0 || l >= c.NumHiddenLayers {
			return r.Errorf("mlp_only_layers", "layer %d is outside 0..%d (num_hidden_layers %d)", l, c.NumHiddenLayers-1, c.NumHiddenLayers)
		}
	}
	c.MoE = m
	return nil
}

// MoEJSON is the config.json fields of c's experts as fs spells them, for
// Spec.Extra.
func MoEJSON(c *Config, fs MoEFields) map[string]any {
	m := c.MoE
	out := map[string]any{"num_experts_per_tok": m.TopK, "router_aux_loss_coef": 0.001, "output_router_logits": false}
	if len(fs.ExpertKeys) > 0 {
		out[fs.ExpertKeys[0]] = m.Experts
	}
	if fs.WidthKey != "" {
		out[fs.WidthKey] = m.IntermediateSize
	}
	if fs.NormKey != "" {
		out[fs.NormKey] = m.NormTopK
	}
	if fs.Layout {
		out["decoder_sparse_step"] = max(m.SparseStep, 1)
		dense := m.DenseLayers
		if dense == nil {
			dense = []int{}
		}
		out["mlp_only_layers"] = dense
	}
	return out
}

// MoEBlock is a sparse layer's mixture of experts: a router (Linear D→E, no
// bias) and E experts, each a gated MLP (children named as the checkpoint
// names them). A shard of a model sharded by experts (shard.go) holds only
// its experts [First, First+len(Experts)), still under their checkpoint
// names, and the router whole: it routes every token as the full model
// does and runs only the routed experts it holds, the others contributing
// nothing to its partial sum (the all-reduce after the MLP adds the
// shards'). Its forward over T tokens routes every token, then runs each
// expert that at least one token routes to, in ascending expert index, over
// the rows of its tokens only, through the expert's own nn.Call (so a hook
// sees each expert's forward, and an offload engine may bind its weights
// just for it), and adds its output rows scaled by the routing weights.
// Before the first expert it announces the experts it will call, in that
// order (nn.Announce). A forward of a few tokens whose experts no hook
// watches runs through the backend's fused expert ops instead, routing on
// the device (moefused.go).
type MoEBlock struct {
	nn.Base
	Router   *nn.Linear // [E, D]
	Experts  []*MLP     // the experts held: gate and up [I_e, D], down [D, I_e]; Experts[i] is expert First+i
	First    int        // the index of Experts[0] among the router's E
	TopK     int
	NormTopK bool
	table    *moeTable   // the fused path's weight table (moefused.go)
	mods     []nn.Module // Experts as modules, for nn.Unwatched
}

// AnnouncesChildren reports that the block announces the experts it calls
// (nn.ChildAnnouncer): an offloading engine knows before any forward that
// they are data-dependent.
func (p *MoEBlock) AnnouncesChildren() bool { return true }

// newMoEBlock attaches layer l's expert block where names puts it.
func newMoEBlock(l *Layer, cfg *Config, names MoENames, linear func(nn.Module, string, int, int) *nn.Linear) *MoEBlock {
	D, E, I := cfg.HiddenSize, cfg.MoE.Experts, cfg.MoE.IntermediateSize
	lo, hi := cfg.MoE.OwnedRange()
	blk := &MoEBlock{TopK: cfg.MoE.TopK, NormTopK: cfg.MoE.NormTopK, First: lo}
	attach(l, names.Block, blk)
	blk.Router = linear(blk, names.Router, D, E)
	experts := container(blk, names.Experts)
	for e := lo; e < hi; e++ {
		x := &MLP{}
		nn.Attach(experts, fmt.Sprint(e), x)
		x.Gate = linear(x, names.Gate, D, I)
		x.Up = linear(x, names.Up, D, I)
		x.Down = linear(x, names.Down, I, D)
		blk.Experts = append(blk.Experts, x)
	}
	return blk
}

// moeScratch is the activations of a workspace's expert blocks, made at
// the first sparse forward: rows for up to the workspace's cap tokens.
type moeScratch struct {
	logits *runtime.Tensor // [cap, E] F32 router logits
	x      *runtime.Tensor // [cap, D] an expert's gathered input rows
	gate   *runtime.Tensor // [cap, I_e]
	up     *runtime.Tensor // [cap, I_e]
	y      *runtime.Tensor // [cap, D] F32 an expert's output rows
	host   []float32       // cap·E router logits on the host
	route  kernels.Routing
	// The fused path's (moefused.go), made at its first forward.
	ids, wts *runtime.Tensor // [n, K] I32 routed experts, F32 weights
	act      *runtime.Tensor // [n·K, I_e] the routed experts' activations
}

// moeFor returns w's expert scratch, allocating it (held by w) on first use.
func (m *Model) moeFor(b kernels.Backend, w *workspace) (*moeScratch, error) {
	if w.moe != nil {
		return w.moe, nil
	}
	c := m.Cfg
	s := &moeScratch{host: make([]float32, w.cap*c.MoE.Experts)}
	for _, a := range []struct {
		dst   **runtime.Tensor
		dt    runtime.DType
		label string
		width int
	}{{&s.logits, runtime.F32, "router logits", c.MoE.Experts}, {&s.x, b.ActDType(), "expert input", c.HiddenSize},
		{&s.gate, b.ActDType(), "expert gate", c.MoE.IntermediateSize}, {&s.up, b.ActDType(), "expert up", c.MoE.IntermediateSize},
		{&s.y, runtime.F32, "expert output", c.HiddenSize}} {
		t, err := runtime.NewTensor(b.Device(), a.dt, []int{w.cap, a.width}, "activations "+a.label)
		if err != nil {
			return nil, err
		}
		w.bufs = append(w.bufs, t.Buffer())
		*a.dst = t
	}
	w.moe = s
	return s, nil
}

// ffn is the layer's feed-forward half: out[T,D] from h[T,D] through the
// dense MLP or the expert block.
func (l *Layer) ffn(b kernels.Backend, w *workspace, out, h *runtime.Tensor) error {
	if l.MoE != nil {
		return l.MoE.Forward(b, w, out, h)
	}
	return l.MLP.Forward(b, w, out, h)
}

// Forward of the expert block: out[T,D] = Σ over each token's routed
// experts of weight · expert(h[t]) (see the package's MoE comment); through
// the fused ops for a few tokens where it can (moefused.go).
func (p *MoEBlock) Forward(b kernels.Backend, w *workspace, out, h *runtime.Tensor) error {
	T := h.Dim(0)
	m := p.Node().Tree().Root().(*Model)
	return nn.Call(p, func() error {
		if f, ok, err := p.fused(b, m, T); err != nil {
			return err
		} else if ok {
			return p.forwardFused(b, f, m, w, out, h)
		}
		mk, err := kernels.MoEOf(b)
		if err != nil {
			return fmt.Errorf("%s: %w", p.Node().Name(), err)
		}
		s, err := m.moeFor(b, w)
		if err != nil {
			return err
		}
		E := m.Cfg.MoE.Experts
		logits := rows(s.logits, T) // [T,E]
		if err := p.Router.Forward(b, logits, h); err != nil {
			return err
		}
		host := s.host[:T*E]
		if err := b.ReadF32(host, logits); err != nil {
			return err
		}
		if err := s.route.Route(host, E, p.TopK, p.NormTopK); err != nil {
			return fmt.Errorf("%s: %w", p.Node().Name(), err)
		}
		groups := s.route.Groups()
		order := make([]nn.Module, 0, len(groups))
		held := make([]kernels.ExpertRows, 0, len(groups))
		for _, g := range groups {
			if x := p.held(g.Expert); x != nil { // another shard's expert: its shard adds it
				order = append(order, x)
				held = append(held, g)
			}
		}
		nn.Announce(p, order...)
		if err := mk.Zero(out); err != nil {
			return err
		}
		for _, g := range held {
			n := len(g.Rows)
			x := h // every token, in order: no gather
			if n < T {
				x = rows(s.x, n)
				if err := mk.GatherRows(x, h, g.Rows); err != nil {
					return err
				}
			}
			y := rows(s.y, n)
			if err := p.held(g.Expert).run(b, y, x, rows(s.gate, n), rows(s.up, n)); err != nil {
				return err
			}
			if err := mk.ScatterAddRows(out, y, g.Rows, g.Weights); err != nil {
				return err
			}
		}
		return nil
	})
}

// held is expert e (an index among the router's E) if the block holds it,
// else nil.
func (p *MoEBlock) held(e int) *MLP {
	if i := e - p.First; i >= 0 && i < len(p.Experts) {
		return p.Experts[i]
	}
	return nil
}

// run is the MLP as an expert over x[n,D] into out[n,D], g and u [n,I_e]
// its scratch, inside its own nn.Call: out = down(silu(gate(x))·up(x)).
func (p *MLP) run(b kernels.Backend, out, x, g, u *runtime.Tensor) error {
	return nn.Call(p, func() error {
		if err := p.gateUp(b, g, u, normed{h: x}); err != nil {
			return err
		}
		return p.Down.Forward(b, out, g)
	})
}
