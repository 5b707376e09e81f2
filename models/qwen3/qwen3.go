// Package qwen3 is the Qwen3 family (Qwen3ForCausalLM, model_type "qwen3"):
// a Llama-style decoder with a per-head RMSNorm of q and k over head_dim
// before RoPE (self_attn.q_norm, self_attn.k_norm), an explicit head_dim that
// need not be hidden_size/num_attention_heads, and no biases.
// Sliding-window layers (use_sliding_window true) and attention_bias true
// are not supported; no published checkpoint uses them. Importing the
// package registers the family with models.
package qwen3

import (
	"errors"
	"fmt"

	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/models/decoder"
)

// Architecture and ModelType identify Qwen3 checkpoints in config.json.
const (
	Architecture = "Qwen3ForCausalLM"
	ModelType    = "qwen3"
)

// Names is Qwen3's tensor-name table: transformers' standard one, with
// self_attn.q_norm and self_attn.k_norm.
var Names = decoder.StandardNames

// Config is a parsed Qwen3 config.json: the decoder knobs (QKNorm always
// true) and the header.
type Config struct {
	decoder.Config
	decoder.Header
}

// ParseConfig parses a Qwen3ForCausalLM config.json in either transformers
// layout (rope_theta or rope_parameters, torch_dtype or dtype); source names
// the file in errors. It rejects another architecture, an activation other
// than silu, attention or MLP biases, sliding-window layers, and what
// decoder.ReadConfig rejects.
func ParseConfig(data []byte, source string) (*Config, error) {
	r, err := loader.ParseFields(data, source)
	if err != nil {
		return nil, err
	}
	h, err := decoder.ReadHeader(r, Architecture, ModelType)
	if err != nil {
		return nil, err
	}
	c := &Config{Header: h, Config: decoder.ReadConfig(r)}
	decoder.FullAttentionOnly(r)
	if err := r.Err(); err != nil {
		return nil, err
	}
	switch {
	case c.AttentionBias:
		return nil, r.Errorf("attention_bias", "true is not supported (q, k, v and o biases in Qwen3 are not implemented)")
	case c.MLPBias:
		return nil, r.Errorf("mlp_bias", "true is not supported (Qwen3's MLP has no bias)")
	}
	c.QKNorm = true
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("config %s: %w", source, err)
	}
	return c, nil
}

// New builds the module tree for cfg with no weights bound.
func New(cfg *Config) (*decoder.Model, error) {
	if cfg == nil {
		return nil, errors.New("qwen3.New: nil config")
	}
	return decoder.New(&cfg.Config, Names)
}

// Shapes are Qwen3's named shapes for random-weight checkpoints.
var Shapes = map[string]decoder.Config{
	// Qwen3-8B: 8.2 B parameters, untied.
	"qwen3-8b": {HiddenSize: 4096, IntermediateSize: 12288, NumHiddenLayers: 36, NumAttentionHeads: 32, NumKeyValueHeads: 8,
		HeadDim: 128, VocabSize: 151936, MaxPositionEmbeddings: 40960, RMSNormEps: 1e-6, QKNorm: true,
		Rope: decoder.Rope{Theta: 1e6, Type: "default"}, BOSTokenID: 151643, EOSTokenIDs: []int{151645}},
	// A tiny Qwen3 for tests: head_dim 32 ≠ hidden/heads = 16, tied embeddings.
	"qwen3-tiny": {HiddenSize: 64, IntermediateSize: 160, NumHiddenLayers: 4, NumAttentionHeads: 4, NumKeyValueHeads: 2,
		HeadDim: 32, VocabSize: 256, MaxPositionEmbeddings: 512, RMSNormEps: 1e-6, QKNorm: true, TieWordEmbeddings: true,
		Rope: decoder.Rope{Theta: 1e6, Type: "default"}, BOSTokenID: 0, EOSTokenIDs: []int{1}},
}

// ConfigJSON writes c as a transformers-5 Qwen3 config.json.
func ConfigJSON(c *decoder.Config) ([]byte, error) {
	return decoder.ConfigJSON(c, Architecture, ModelType, map[string]any{
		"attention_bias": false, "use_sliding_window": false, "sliding_window": nil, "max_window_layers": c.NumHiddenLayers,
	})
}

// Family registers Qwen3 with the models registry.
var Family = models.Family{
	Name:          ModelType,
	Architectures: []string{Architecture},
	ModelTypes:    []string{ModelType},
	New: func(data []byte, source string) (*decoder.Model, error) {
		c, err := ParseConfig(data, source)
		if err != nil {
			return nil, err
		}
		return New(c)
	},
	Shapes: models.ShapesOf(Shapes, ConfigJSON),
}

func init() { models.Register(Family) }
