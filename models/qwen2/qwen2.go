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

// Spec is Qwen2's config.json identity (Qwen2ForCausalLM, model_type qwen2)
// and what sets it apart from the other Llama-style families;
// Spec.ParseConfig parses its config.json, Spec.New builds a model and
// Spec.ConfigJSON writes one. Its tensor names are transformers' standard
// table, with self_attn.{q,k,v}_proj.bias.
var Spec = decoder.Spec{Architecture: "Qwen2ForCausalLM", ModelType: "qwen2", Names: decoder.StandardNames, Adjust: adjust, Extra: decoder.FullAttentionJSON}

// adjust fixes Qwen2's knobs: full attention in every layer, q, k and v
// with a bias (Qwen2Attention: bias=True; o_proj has none), no MLP bias.
func adjust(r *loader.Fields, c *decoder.Config) error {
	if err := decoder.FullAttentionOnly(r); err != nil {
		return err
	}
	c.AttentionBias = true
	return decoder.NoBias(r, c, "", "Qwen2's MLP has no bias")
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

// Family registers Qwen2 with the models registry.
var Family = models.DecoderFamily(Spec, Shapes)

func init() { models.Register(Family) }
