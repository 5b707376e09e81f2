// Package qwen3 is the Qwen3 family (Qwen3ForCausalLM, model_type "qwen3"):
// a Llama-style decoder with a per-head RMSNorm of q and k over head_dim
// before RoPE (self_attn.q_norm, self_attn.k_norm), an explicit head_dim that
// need not be hidden_size/num_attention_heads, and no biases.
// Sliding-window layers (use_sliding_window true) and attention_bias true
// are not supported; no published checkpoint uses them. Importing the
// package registers the family with models.
package qwen3

import (
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/models/decoder"
)

// Spec is Qwen3's config.json identity (Qwen3ForCausalLM, model_type qwen3)
// and what sets it apart from the other Llama-style families;
// Spec.ParseConfig parses its config.json, Spec.New builds a model and
// Spec.ConfigJSON writes one. Its tensor names are transformers' standard
// table, with self_attn.q_norm and self_attn.k_norm.
var Spec = decoder.Spec{Architecture: "Qwen3ForCausalLM", ModelType: "qwen3", Names: decoder.StandardNames, Adjust: adjust, Extra: extra}

// adjust fixes Qwen3's knobs: full attention in every layer, no biases,
// and the per-head q/k RMSNorm.
func adjust(r *loader.Fields, c *decoder.Config) error {
	if err := decoder.FullAttentionOnly(r); err != nil {
		return err
	}
	if err := decoder.NoBias(r, c, "q, k, v and o biases in Qwen3 are not implemented", "Qwen3's MLP has no bias"); err != nil {
		return err
	}
	c.QKNorm = true
	return nil
}

// extra is what a Qwen3 config.json has beyond the generic fields: no
// sliding-window layers, no attention bias.
func extra(c *decoder.Config) map[string]any {
	m := decoder.FullAttentionJSON(c)
	m["attention_bias"] = false
	return m
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

// Family registers Qwen3 with the models registry.
var Family = models.DecoderFamily(Spec, Shapes)

func init() { models.Register(Family) }
