// Package qwen2 is the Qwen2 family (Qwen2ForCausalLM, model_type "qwen2";
// Qwen2 and Qwen2.5 checkpoints): a Llama-style decoder whose q, k and v
// projections always have biases (o_proj has none; there is no config flag),
// with tied embeddings in the small sizes. Sliding-window layers
// (use_sliding_window true) are not supported; no published checkpoint uses
// them. Importing the package registers the family with models.
package qwen2

import (
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/models/decoder"
)

// Architecture and ModelType identify Qwen2 checkpoints in config.json.
const (
	Architecture = "Qwen2ForCausalLM"
	ModelType    = "qwen2"
)

// Names is Qwen2's tensor-name table: transformers' standard one, with
// self_attn.{q,k,v}_proj.bias.
var Names = decoder.StandardNames

// Config is a parsed Qwen2 config.json: the decoder knobs (AttentionBias
// always true) and the header.
type Config = decoder.FamilyConfig

// Spec is what sets Qwen2 apart from the other Llama-style families.
var Spec = decoder.Spec{Architecture: Architecture, ModelType: ModelType, Names: Names, Adjust: adjust, Extra: extra}

// ParseConfig parses a Qwen2ForCausalLM config.json in either transformers
// layout (rope_theta or rope_parameters, torch_dtype or dtype); source names
// the file in errors. It rejects another architecture, an activation other
// than silu, sliding-window layers, and what decoder.ReadConfig rejects.
func ParseConfig(data []byte, source string) (*Config, error) { return Spec.ParseConfig(data, source) }

// New builds the module tree for cfg with no weights bound.
func New(cfg *Config) (*decoder.Model, error) { return Spec.New(cfg) }

// adjust fixes Qwen2's knobs: full attention in every layer, q, k and v
// with a bias (Qwen2Attention: bias=True; o_proj has none), no MLP bias.
func adjust(r *loader.Fields, c *decoder.Config) error {
	decoder.FullAttentionOnly(r)
	if err := r.Err(); err != nil {
		return err
	}
	c.AttentionBias = true
	return decoder.NoBias(r, c, "", "Qwen2's MLP has no bias")
}

// extra is what a Qwen2 config.json has beyond the generic fields: no
// sliding-window layers.
func extra(c *decoder.Config) map[string]any {
	return map[string]any{"use_sliding_window": false, "sliding_window": nil, "max_window_layers": c.NumHiddenLayers}
}

// Shapes are Qwen2's named shapes for random-weight checkpoints.
var Shapes = map[string]decoder.Config{
	// Qwen2.5-7B: 7.6 B parameters, untied, q/k/v biases.
	"qwen2.5-7b": {HiddenSize: 3584, IntermediateSize: 18944, NumHiddenLayers: 28, NumAttentionHeads: 28, NumKeyValueHeads: 4,
		HeadDim: 128, VocabSize: 152064, MaxPositionEmbeddings: 32768, RMSNormEps: 1e-6, AttentionBias: true,
		Rope: decoder.Rope{Theta: 1e6, Type: "default"}, BOSTokenID: 151643, EOSTokenIDs: []int{151643}},
	// A tiny Qwen2 for tests: tied embeddings, like the small sizes.
	"qwen2-tiny": {HiddenSize: 64, IntermediateSize: 160, NumHiddenLayers: 4, NumAttentionHeads: 4, NumKeyValueHeads: 2,
		HeadDim: 16, VocabSize: 256, MaxPositionEmbeddings: 512, RMSNormEps: 1e-6, AttentionBias: true, TieWordEmbeddings: true,
		Rope: decoder.Rope{Theta: 1e6, Type: "default"}, BOSTokenID: 0, EOSTokenIDs: []int{1}},
}

// ConfigJSON writes c as a transformers-5 Qwen2 config.json.
func ConfigJSON(c *decoder.Config) ([]byte, error) { return Spec.ConfigJSON(c) }

// Family registers Qwen2 with the models registry.
var Family = models.DecoderFamily(Spec, Shapes)

func init() { models.Register(Family) }
