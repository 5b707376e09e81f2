// Package mixtral is the Mixtral family (MixtralForCausalLM, model_type
// "mixtral"): a Mistral-style decoder (explicit head_dim, an optional
// sliding window) whose every layer's MLP is a sparse mixture of experts:
// block_sparse_moe.gate routes each token to num_experts_per_tok of
// num_local_experts experts (softmax, top-k, renormalised), each expert a
// gated MLP block_sparse_moe.experts.E.{w1 (gate), w3 (up), w2 (down)} of
// intermediate_size. Importing the package registers the family with
// models.
package mixtral

import (
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/models/decoder"
)

// Names is Mixtral's tensor-name table: transformers' standard one with the
// experts under block_sparse_moe.
var Names = func() decoder.Names {
	n := decoder.StandardNames
	n.MoE = decoder.MoENames{Block: "block_sparse_moe", Router: "gate", Experts: "experts", Gate: "w1", Up: "w3", Down: "w2"}
	return n
}()

// Fields is how Mixtral's config.json spells its experts: num_local_experts
// (default 8), num_experts_per_tok (default 2), the experts as wide as
// intermediate_size, always renormalised, every layer sparse.
var Fields = decoder.MoEFields{ExpertKeys: []string{"num_local_experts"}, DefaultExperts: 8, DefaultTopK: 2}

// Spec is Mixtral's config.json identity (MixtralForCausalLM, model_type
// mixtral) and what sets it apart; Spec.ParseConfig parses its config.json,
// Spec.New builds a model and Spec.ConfigJSON writes one.
var Spec = decoder.Spec{Architecture: "MixtralForCausalLM", ModelType: "mixtral", Names: Names, Adjust: adjust, Extra: extra}

// adjust reads Mixtral's sliding window (absent or null: none) and experts,
// and rejects biases.
func adjust(r *loader.Fields, c *decoder.Config) error {
	if r.Present("sliding_window") {
		if c.SlidingWindow = r.Int("sliding_window", 0); r.Err() == nil && c.SlidingWindow <= 0 {
			r.Fail(r.Errorf("sliding_window", "%d: want a positive number of positions (null for no window)", c.SlidingWindow))
		}
	}
	if err := r.Err(); err != nil {
		return err
	}
	const why = "Mixtral projections have no bias"
	if err := decoder.NoBias(r, c, why, why); err != nil {
		return err
	}
	return decoder.ReadMoE(r, c, Fields)
}

// extra is what a Mixtral config.json has beyond the generic fields: the
// sliding window (null when none) and the experts.
func extra(c *decoder.Config) map[string]any {
	m := decoder.MoEJSON(c, Fields)
	var w any
	if c.SlidingWindow > 0 {
		w = c.SlidingWindow
	}
	m["sliding_window"] = w
	m["router_jitter_noise"] = 0.0
	return m
}

// mixtral8x7b is Mixtral-8x7B-v0.1's config.json (46.7 B parameters).
var mixtral8x7b = decoder.Config{HiddenSize: 4096, IntermediateSize: 14336, NumHiddenLayers: 32, NumAttentionHeads: 32, NumKeyValueHeads: 8,
	HeadDim: 128, VocabSize: 32000, MaxPositionEmbeddings: 32768, RMSNormEps: 1e-5,
	Rope: decoder.Rope{Theta: 1e6, Type: "default"}, BOSTokenID: 1, EOSTokenIDs: []int{2},
	MoE: decoder.MoE{Experts: 8, TopK: 2, IntermediateSize: 14336, NormTopK: true, SparseStep: 1}}

// Shapes are Mixtral's named shapes for random-weight checkpoints.
var Shapes = map[string]decoder.Config{
	// Mixtral-8x7B-v0.1: 8 experts of 14336, top 2, vocabulary 32000.
	"mixtral-8x7b": mixtral8x7b,
	// Mixtral-8x7B cut to 4 of its 32 layers (6.07 B parameters, 12.1 GB): real
	// per-layer sizes for tests.
	"mixtral-8x7b-4l": func() decoder.Config { c := mixtral8x7b; c.NumHiddenLayers = 4; return c }(),
	// A tiny Mixtral for tests: 8 experts of 96, top 2.
	"mixtral-tiny": {HiddenSize: 64, IntermediateSize: 96, NumHiddenLayers: 3, NumAttentionHeads: 4, NumKeyValueHeads: 2,
		HeadDim: 32, VocabSize: 256, MaxPositionEmbeddings: 512, RMSNormEps: 1e-6,
		Rope: decoder.Rope{Theta: 1e6, Type: "default"}, BOSTokenID: 0, EOSTokenIDs: []int{1},
		MoE: decoder.MoE{Experts: 8, TopK: 2, IntermediateSize: 96, NormTopK: true, SparseStep: 1}},
}

// Family registers Mixtral with the models registry.
var Family = models.DecoderFamily(Spec, Shapes)

func init() { models.Register(Family) }
