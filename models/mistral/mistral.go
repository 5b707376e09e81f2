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

// Spec is Mistral's config.json identity (MistralForCausalLM, model_type
// mistral) and what sets it apart from the other Llama-style families;
// Spec.ParseConfig parses its config.json, Spec.New builds a model and
// Spec.ConfigJSON writes one. Its tensor names are transformers' standard
// table.
var Spec = decoder.Spec{Architecture: "MistralForCausalLM", ModelType: "mistral", Names: decoder.StandardNames, Adjust: adjust, Extra: extra}

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

// Family registers Mistral with the models registry.
var Family = models.DecoderFamily(Spec, Shapes)

func init() { models.Register(Family) }
