// Package mistral is the Mistral family (MistralForCausalLM, model_type
// "mistral"): a Llama-style decoder with an explicit head_dim and an
// optional sliding window ("sliding_window": each query sees only the last
// sliding_window positions, itself included, in prefill and decode alike;
// null means none). Importing the package registers the family with models.
package mistral

import (
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/models/decoder"
)

// Architecture and ModelType identify Mistral checkpoints in config.json.
const (
	Architecture = "MistralForCausalLM"
	ModelType    = "mistral"
)

// Names is Mistral's tensor-name table: transformers' standard one.
var Names = decoder.StandardNames

// Config is a parsed Mistral config.json: the decoder knobs (SlidingWindow
// from "sliding_window") and the header.
type Config = decoder.FamilyConfig

// Spec is what sets Mistral apart from the other Llama-style families.
var Spec = decoder.Spec{Architecture: Architecture, ModelType: ModelType, Names: Names, Adjust: adjust, Extra: extra}

// ParseConfig parses a MistralForCausalLM config.json in either
// transformers layout (rope_theta or rope_parameters, torch_dtype or
// dtype); source names the file in errors. It rejects another
// architecture, an activation other than silu, a sliding_window that is not
// a positive integer or null, attention or MLP biases, and what
// decoder.ReadConfig rejects.
func ParseConfig(data []byte, source string) (*Config, error) { return Spec.ParseConfig(data, source) }

// New builds the module tree for cfg with no weights bound.
func New(cfg *Config) (*decoder.Model, error) { return Spec.New(cfg) }

// adjust reads Mistral's sliding window (absent or null: none) and rejects
// biases.
func adjust(r *loader.Fields, c *decoder.Config) error {
	if r.Present("sliding_window") {
		if c.SlidingWindow = r.Int("sliding_window", 0); r.Err() == nil && c.SlidingWindow <= 0 {
			r.Fail(r.Errorf("sliding_window", "%d: want a positive number of positions (null for no window)", c.SlidingWindow))
		}
	}
	if err := r.Err(); err != nil {
		return err
	}
	const why = "Mistral projections have no bias"
	return decoder.NoBias(r, c, why, why)
}

// extra is what a Mistral config.json has beyond the generic fields: the
// sliding window, null when c has none.
func extra(c *decoder.Config) map[string]any {
	var w any
	if c.SlidingWindow > 0 {
		w = c.SlidingWindow
	}
	return map[string]any{"sliding_window": w}
}

// Shapes are Mistral's named shapes for random-weight checkpoints.
var Shapes = map[string]decoder.Config{
	// Mistral-7B-v0.3: 7.25 B parameters, vocabulary 32768, no sliding window.
	"mistral-7b": {HiddenSize: 4096, IntermediateSize: 14336, NumHiddenLayers: 32, NumAttentionHeads: 32, NumKeyValueHeads: 8,
		HeadDim: 128, VocabSize: 32768, MaxPositionEmbeddings: 32768, RMSNormEps: 1e-5,
		Rope: decoder.Rope{Theta: 1e6, Type: "default"}, BOSTokenID: 1, EOSTokenIDs: []int{2}},
	// A tiny Mistral for tests: a sliding window of 8 positions.
	"mistral-tiny": {HiddenSize: 64, IntermediateSize: 160, NumHiddenLayers: 4, NumAttentionHeads: 4, NumKeyValueHeads: 2,
		HeadDim: 32, VocabSize: 256, MaxPositionEmbeddings: 512, RMSNormEps: 1e-6, SlidingWindow: 8,
		Rope: decoder.Rope{Theta: 10000, Type: "default"}, BOSTokenID: 0, EOSTokenIDs: []int{1}},
}

// ConfigJSON writes c as a transformers-5 Mistral config.json
// (sliding_window null when c has none).
func ConfigJSON(c *decoder.Config) ([]byte, error) { return Spec.ConfigJSON(c) }

// Family registers Mistral with the models registry.
var Family = models.DecoderFamily(Spec, Shapes)

func init() { models.Register(Family) }
