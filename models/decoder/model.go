package decoder

import (
	"fmt"
	"strings"
	"sync"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// Names is a family's tensor-name table: where each module sits in the
// checkpoint. Embed, Layers, Norm and Head are paths from the root
// ("model.embed_tokens"); the rest are paths inside a layer (InputNorm,
// Attn, PostNorm, MLP), inside its attention (Q, K, V, O) or inside its MLP
// (Gate, Up, Down). A dotted path makes containers for its leading parts.
// Parameters are "<module>.weight" (and "<module>.bias" for biased
// projections). QNorm and KNorm, inside the attention, are needed only with
// Config.QKNorm.
type Names struct {
	Embed, Layers, Norm, Head      string
	InputNorm, Attn, PostNorm, MLP string
	Q, K, V, O                     string
	QNorm, KNorm                   string
	Gate, Up, Down                 string
	MoE                            MoENames // a sparse layer's experts (moe.go); empty for dense families
}

// Attention is grouped-query self-attention with rotary positions:
// out = O(attn(rope(qn(Q h)), rope(kn(K h)), V h)), qn and kn the per-head
// RMSNorms over d when the config has them (else the identity); Q, K and V
// may have biases; with a sliding window W each query sees only the last W
// positions.
type Attention struct {
	nn.Base
	Q, K, V, O   *nn.Linear
	QNorm, KNorm *nn.RMSNorm // nil unless Config.QKNorm: weights [d], applied to each head
	Layer        int         // the layer's index: which KV cache layer it reads
	Window       int         // Config.SlidingWindow; 0 = all positions
	// QScale multiplies the rotated queries (0: not at all): the square of
	// a yarn or longrope attention factor f, which transformers applies to
	// cos and sin and so to both q and k; scaling q by f² gives the same
	// scores and leaves the cached keys as they are.
	QScale float32
}

// MLP is the gated MLP: down(silu(gate(x)) · up(x)).
type MLP struct {
	nn.Base
	Gate, Up, Down *nn.Linear
}

// Layer is one pre-norm decoder layer: x += attn(norm(x)); x += mlp(norm(x)).
type Layer struct {
	nn.Base
	Index     int
	InputNorm *nn.RMSNorm
	Attn      *Attention
	PostNorm  *nn.RMSNorm
	MLP       *MLP        // nil in a sparse layer
	MoE       *MoEBlock   // the experts of a sparse layer (Config.MoE.Sparse); else nil
	graph     *layerGraph // set by UnitGraphs: one-token forwards replay a graph
}

// Model is a decoder-only transformer for causal LM: embedding, layers,
// final norm, LM head.
//
// A Model may be used from several goroutines, but it runs one forward at
// a time: Forward, ForwardBatch, a DecodeGraph's step and each step of
// Generate take the model's forward lock, and the others wait (the
// activations live in one workspace per model). Two Generate calls on one
// model therefore interleave step by step, each over its own KV cache,
// and give each the tokens it gives alone; they do not run faster than one
// after the other. To serve many requests at once, use
// models/generate.Scheduler: it runs them in one batched forward.
type Model struct {
	nn.Base
	Cfg     Config
	Names   Names
	Embed   *nn.Embedding
	Layers  []*Layer
	Norm    *nn.RMSNorm
	Head    *nn.Linear
	invFreq []float32
	ws      *workspace
	// unitGraphs is the backend whose step inputs the layers' graphs read
	// (nil unless UnitGraphs compiled the layers).
	unitGraphs kernels.StepCapturer
	owned      []*runtime.DeviceBuffer
	// passTokens is the token count of the forward in progress (PassTokens).
	passTokens int
	// passAsks: the forward in progress asks where each layer runs
	// (PassAsksPlacement).
	passAsks bool
	// host is the host side of host-placed layers (hostrun.go).
	host *hostSide
	// tp is this shard's rank of a sharded model (nil: not sharded); group
	// is set on rank 0's shard, the leader (shard.go).
	tp    runtime.Communicator
	group *shardGroup
	// MoEFusedTokens is the most tokens a forward runs an expert block
	// through the backend's fused expert ops for (moefused.go): 0 means
	// DefaultMoEFusedTokens, a negative value never (every block then runs
	// expert by expert, routing on the host).
	MoEFusedTokens int
	// NoResidualAccumulate keeps o_proj and down_proj writing a scratch
	// that a separate add puts into the residual stream, also on backends
	// that can add the product in place (accumulate.go; A/B runs, tests).
	NoResidualAccumulate bool
	// BatchHostFree keeps every layer of ForwardBatch on the device: an
	// offload engine with a host backend then runs batched forwards under
	// plans with no layer on the host, as before batched forwards could
	// compute host layers (hostbatch.go; A/B runs, tests).
	// FT_BATCH_HOST=off does the same for every model.
	BatchHostFree bool
	// FullLastLayer runs the last layer of ForwardBatch, and of Forward
	// without allLogits, on every row, as before the forwards ran it past
	// attention on only the rows whose logits they return (lastrows.go;
	// A/B runs, tests). FT_LAST_LAYER=all does the same for every model.
	FullLastLayer bool
	// NoIdleStepGraph runs one-token forwards under idle hooks (an offload
	// plan that streams nothing) eagerly instead of replaying a recorded
	// step (idlestep.go; A/B runs, tests). FT_IDLE_STEP_GRAPH=0 does the
	// same for every model.
	NoIdleStepGraph bool
	// idle is the recorded step of one-token forwards under idle hooks
	// (idlestep.go); guarded by mu.
	idle *idleStep
	// mergeTrace counts the layers that ran merged GEMMs (merged.go).
	mergeTrace mergeTrace
	// mu is the forward lock: every forward (Forward, ForwardBatch, a
	// DecodeGraph's step, each step of Generate with its token's pick)
	// holds it, and so do Stop, Close and the calls that allocate on the
	// model's behalf (NewKVCache, NewPagedCache). The workspace ws, closed
	// and live are guarded by it. Internal paths that run inside a forward
	// (capture, the stepper, a sharded group's ranks) call the unlocked
	// variants: the lock is not re-entrant.
	mu sync.Mutex
	// closed is set by Stop and Close: Generate, Forward, ForwardBatch,
	// CaptureDecode, DecodeGraph.StepAt, NewKVCache and NewPagedCache then
	// refuse with ErrClosed.
	closed bool
	// live are the KV caches of the Generate calls in progress and of the
	// live Solos (solo.go), with their steppers (a captured DecodeGraph):
	// Stop and Close free them (a Generate between steps, in its OnToken say, holds
	// no lock), and the Generate then returns ErrClosed at its next step.
	live map[*KVCache]*stepper
}

// PassTokens is the number of tokens the forward in progress carries (or
// the last one carried): T for Forward, every entry's tokens together for
// ForwardBatch. It makes the model an offload.TokenCounter, so an offload
// engine profiles and plans per tokens-per-forward.
func (m *Model) PassTokens() int { return m.passTokens }

// PassAsksPlacement reports whether the forward in progress asks the module
// tree where each layer runs (nn.Tree.RunsOn): Forward does, ForwardBatch
// unless BatchHostFree. It makes the model an offload.PlacementAsker, so an
// offload engine with a host backend runs a forward that does not ask
// under a plan with no layer on the host.
func (m *Model) PassAsksPlacement() bool { return m.passAsks }

// New builds the module tree for cfg with no weights bound, each module
// where names puts it. With tied embeddings the head shares the embedding's
// weight.
func New(cfg *Config, names Names) (*Model, error) {
	if cfg == nil {
		return nil, fmt.Errorf("decoder.New: nil config")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MoE.Enabled() && (names.MoE.Block == "" || names.MoE.Router == "" || names.MoE.Experts == "" || names.MoE.Gate == "") {
		return nil, fmt.Errorf("decoder.New: the config has experts but the names table does not place them (%+v)", names.MoE)
	}
	if cfg.QKNorm && (names.QNorm == "" || names.KNorm == "") {
		return nil, fmt.Errorf("decoder.New: the config has q/k norms but the names table does not place them (QNorm %q, KNorm %q)", names.QNorm, names.KNorm)
	}
	m := &Model{Cfg: *cfg, Names: names}
	nn.Init(m, "")
	D, I := cfg.HiddenSize, cfg.IntermediateSize
	qd, kvd := cfg.NumAttentionHeads*cfg.HeadDim, cfg.NumKeyValueHeads*cfg.HeadDim
	eps := float32(cfg.RMSNormEps)
	linear := func(parent nn.Module, path string, in, out int) *nn.Linear {
		p, local := at(parent, path)
		return nn.NewLinear(p, local, in, out)
	}
	qkvLinear := func(parent nn.Module, path string, in, out int) *nn.Linear {
		if !cfg.AttentionBias {
			return linear(parent, path, in, out)
		}
		p, local := at(parent, path)
		return nn.NewLinearBias(p, local, in, out)
	}
	normOf := func(parent nn.Module, path string, dim int) *nn.RMSNorm {
		p, local := at(parent, path)
		return nn.NewRMSNorm(p, local, dim, eps)
	}
	norm := func(parent nn.Module, path string) *nn.RMSNorm { return normOf(parent, path, D) }
	p, local := at(m, names.Embed)
	m.Embed = nn.NewEmbedding(p, local, cfg.VocabSize, D)
	layers := container(m, names.Layers)
	for i := 0; i < cfg.NumHiddenLayers; i++ {
		l := &Layer{Index: i}
		nn.Attach(layers, fmt.Sprint(i), l)
		l.InputNorm = norm(l, names.InputNorm)
		l.Attn = &Attention{Layer: i, Window: cfg.SlidingWindow}
		if f := cfg.Rope.AttentionFactor; f != 0 && f != 1 {
			l.Attn.QScale = float32(f * f)
		}
		attach(l, names.Attn, l.Attn)
		l.Attn.Q = qkvLinear(l.Attn, names.Q, D, qd)
		l.Attn.K = qkvLinear(l.Attn, names.K, D, kvd)
		l.Attn.V = qkvLinear(l.Attn, names.V, D, kvd)
		l.Attn.O = linear(l.Attn, names.O, qd, D)
		if cfg.QKNorm {
			l.Attn.QNorm = normOf(l.Attn, names.QNorm, cfg.HeadDim)
			l.Attn.KNorm = normOf(l.Attn, names.KNorm, cfg.HeadDim)
		}
		l.PostNorm = norm(l, names.PostNorm)
		if cfg.MoE.Sparse(i) {
			l.MoE = newMoEBlock(l, cfg, names.MoE, linear)
			m.Layers = append(m.Layers, l)
			continue
		}
		l.MLP = &MLP{}
		attach(l, names.MLP, l.MLP)
		l.MLP.Gate = linear(l.MLP, names.Gate, D, I)
		l.MLP.Up = linear(l.MLP, names.Up, D, I)
		l.MLP.Down = linear(l.MLP, names.Down, I, D)
		m.Layers = append(m.Layers, l)
	}
	m.Norm = norm(m, names.Norm)
	if cfg.TieWordEmbeddings {
		m.Head = &nn.Linear{In: D, Out: cfg.VocabSize}
		attach(m, names.Head, m.Head)
		m.Head.Weight = m.Embed.Weight
		nn.ShareParam(m.Head, m.Embed.Weight)
	} else {
		m.Head = linear(m, names.Head, D, cfg.VocabSize)
	}
	inv, err := kernels.RopeInvFreq(cfg.HeadDim, cfg.Rope.Theta, kernels.RopeScaling{
		Type: cfg.Rope.Type, Factor: cfg.Rope.Factor, LowFreqFactor: cfg.Rope.LowFreqFactor,
		HighFreqFactor: cfg.Rope.HighFreqFactor, OriginalMaxPositions: cfg.Rope.OriginalMaxPositionEmbeddings,
		BetaFast: cfg.Rope.BetaFast, BetaSlow: cfg.Rope.BetaSlow, NoTruncate: cfg.Rope.NoTruncate, ShortFactor: cfg.Rope.ShortFactor,
	})
	if err != nil {
		return nil, fmt.Errorf("decoder.New: rope: %w", err)
	}
	m.invFreq = inv
	if err := m.quantize(); err != nil {
		return nil, fmt.Errorf("decoder.New: %w", err)
	}
	return m, nil
}

// at returns the module a dotted path's last part attaches under (making
// containers for the parts before it, or reusing those already there) and
// that last part.
func at(parent nn.Module, path string) (nn.Module, string) {
	parts := strings.Split(path, ".")
	for _, part := range parts[:len(parts)-1] {
		parent = container(parent, part)
	}
	return parent, parts[len(parts)-1]
}

// container returns the child container at path under parent, making it
// (and the containers above it) when absent.
func container(parent nn.Module, path string) nn.Module {
	for _, part := range strings.Split(path, ".") {
		var next nn.Module
		for _, c := range parent.Node().Children() {
			if c.Node().LocalName() == part {
				next = c
				break
			}
		}
		if next == nil {
			next = nn.NewContainer(parent, part)
		}
		parent = next
	}
	return parent
}

// attach attaches child at the dotted path under parent.
func attach(parent nn.Module, path string, child nn.Module) {
	p, local := at(parent, path)
	nn.Attach(p, local, child)
}

// ParamShapes returns each parameter's qualified name and expected shape.
func (m *Model) ParamShapes() map[string]runtime.Shape {
	out := map[string]runtime.Shape{}
	for _, mod := range nn.Modules(m) {
		switch x := mod.(type) {
		case *nn.Linear:
			out[x.Weight.Name()] = runtime.Shape{x.Out, x.In}
			if x.Bias != nil {
				out[x.Bias.Name()] = runtime.Shape{x.Out}
			}
			if x.Scale != nil {
				out[x.Scale.Name()] = x.ScaleShape()
			}
		case *nn.Embedding:
			out[x.Weight.Name()] = runtime.Shape{x.Vocab, x.Dim}
		case *nn.RMSNorm:
			out[x.Weight.Name()] = runtime.Shape{x.Dim}
		}
	}
	return out
}

// InvFreq is the rotary inverse-frequency table (d/2 values).
func (m *Model) InvFreq() []float32 { return m.invFreq }

// SetInvFreq replaces the rotary inverse-frequency table (d/2 values). It
// exists to reproduce references made by code whose table differs from the
// exact one: transformers models cast with .to(torch.bfloat16) round the
// table's buffer to bfloat16, and that rounding survives a later .float().
func (m *Model) SetInvFreq(inv []float32) error {
	if len(inv) != m.Cfg.HeadDim/2 {
		return fmt.Errorf("decoder: inverse-frequency table of %d values, want head_dim/2 = %d", len(inv), m.Cfg.HeadDim/2)
	}
	m.invFreq = append([]float32(nil), inv...)
	return nil
}
