// Package llama is the Llama decoder (LlamaForCausalLM) built from nn modules:
// weights bound by their checkpoint names, a forward pass over a KV cache, and
// generation.
//
// Dimension letters: T tokens in a forward, D hidden size, H query heads, K
// key/value heads, d head width, I MLP inner width, V vocabulary, C cache
// capacity.
package llama

import (
	"fmt"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// Config is the Hugging Face config.json of a LlamaForCausalLM.
type Config = loader.LlamaConfig

// Attention is grouped-query self-attention with rotary positions.
type Attention struct {
	nn.Base
	Q, K, V, O *nn.Linear
}

// MLP is down(silu(gate(x)) · up(x)).
type MLP struct {
	nn.Base
	Gate, Up, Down *nn.Linear
}

// Layer is one decoder layer: x += attn(norm(x)); x += mlp(norm(x)).
type Layer struct {
	nn.Base
	Index     int
	InputNorm *nn.RMSNorm
	Attn      *Attention
	PostNorm  *nn.RMSNorm
	MLP       *MLP
	graph     *layerGraph // set by UnitGraphs: one-token forwards replay a graph
}

// Model is LlamaForCausalLM: embedding, layers, final norm, LM head.
type Model struct {
	nn.Base
	Cfg     Config
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
}

// New builds the module tree for cfg with no weights bound. Names follow the
// checkpoint: model.embed_tokens, model.layers.N.self_attn.q_proj, ...,
// model.norm, lm_head. With tied embeddings, lm_head shares embed_tokens' weight.
func New(cfg *Config) (*Model, error) {
	if cfg == nil {
		return nil, fmt.Errorf("llama.New: nil config")
	}
	m := &Model{Cfg: *cfg}
	nn.Init(m, "")
	inner := nn.NewContainer(m, "model")
	D, I := cfg.HiddenSize, cfg.IntermediateSize
	qd, kvd := cfg.NumAttentionHeads*cfg.HeadDim, cfg.NumKeyValueHeads*cfg.HeadDim
	eps := float32(cfg.RMSNormEps)
	m.Embed = nn.NewEmbedding(inner, "embed_tokens", cfg.VocabSize, D)
	layers := nn.NewContainer(inner, "layers")
	for i := 0; i < cfg.NumHiddenLayers; i++ {
		l := &Layer{Index: i}
		nn.Attach(layers, fmt.Sprint(i), l)
		l.InputNorm = nn.NewRMSNorm(l, "input_layernorm", D, eps)
		l.Attn = &Attention{}
		nn.Attach(l, "self_attn", l.Attn)
		l.Attn.Q = nn.NewLinear(l.Attn, "q_proj", D, qd)
		l.Attn.K = nn.NewLinear(l.Attn, "k_proj", D, kvd)
		l.Attn.V = nn.NewLinear(l.Attn, "v_proj", D, kvd)
		l.Attn.O = nn.NewLinear(l.Attn, "o_proj", qd, D)
		l.PostNorm = nn.NewRMSNorm(l, "post_attention_layernorm", D, eps)
		l.MLP = &MLP{}
		nn.Attach(l, "mlp", l.MLP)
		l.MLP.Gate = nn.NewLinear(l.MLP, "gate_proj", D, I)
		l.MLP.Up = nn.NewLinear(l.MLP, "up_proj", D, I)
		l.MLP.Down = nn.NewLinear(l.MLP, "down_proj", I, D)
		m.Layers = append(m.Layers, l)
	}
	m.Norm = nn.NewRMSNorm(inner, "norm", D, eps)
	if cfg.TieWordEmbeddings {
		m.Head = &nn.Linear{In: D, Out: cfg.VocabSize}
		nn.Attach(m, "lm_head", m.Head)
		m.Head.Weight = m.Embed.Weight
		nn.ShareParam(m.Head, m.Embed.Weight)
	} else {
		m.Head = nn.NewLinear(m, "lm_head", D, cfg.VocabSize)
	}
	inv, err := kernels.RopeInvFreq(cfg.HeadDim, cfg.Rope.Theta, kernels.RopeScaling{
		Type: cfg.Rope.Type, Factor: cfg.Rope.Factor, LowFreqFactor: cfg.Rope.LowFreqFactor,
		HighFreqFactor: cfg.Rope.HighFreqFactor, OriginalMaxPositions: cfg.Rope.OriginalMaxPositionEmbeddings,
	})
	if err != nil {
		return nil, fmt.Errorf("llama.New: rope: %w", err)
	}
	m.invFreq = inv
	return m, nil
}

// ParamShapes returns each parameter's qualified name and expected shape.
func (m *Model) ParamShapes() map[string]runtime.Shape {
	out := map[string]runtime.Shape{}
	for _, mod := range nn.Modules(m) {
		switch x := mod.(type) {
		case *nn.Linear:
			out[x.Weight.Name()] = runtime.Shape{x.Out, x.In}
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
		return fmt.Errorf("llama: inverse-frequency table of %d values, want head_dim/2 = %d", len(inv), m.Cfg.HeadDim/2)
	}
	m.invFreq = append([]float32(nil), inv...)
	return nil
}
