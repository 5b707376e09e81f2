// Package qwen3moe is the Qwen3-MoE family (Qwen3MoeForCausalLM, model_type
// "qwen3_moe"): Qwen3's attention (per-head q/k RMSNorm, explicit
// head_dim, no biases) with sparse layers whose mlp.gate routes each token
// to num_experts_per_tok experts (softmax, top-k, renormalised when
// norm_topk_prob), each a gated MLP mlp.experts.E.{gate,up,down}_proj of
// moe_intermediate_size. Layer i is sparse when (i+1) % decoder_sparse_step
// == 0 and i is not in mlp_only_layers; the others have Qwen3's dense MLP
// of intermediate_size. The expert count is num_experts in transformers 4
// configs and num_local_experts in transformers 5 ones. Importing the
// package registers the family with models.
package qwen3moe

import (
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/models/decoder"
)

// Names is Qwen3-MoE's tensor-name table: transformers' standard one (with
// q_norm and k_norm) and the experts under mlp.
var Names = func() decoder.Names {
	n := decoder.StandardNames
	n.MoE = decoder.MoENames{Block: "mlp", Router: "gate", Experts: "experts", Gate: "gate_proj", Up: "up_proj", Down: "down_proj"}
	return n
}()

// Fields is how Qwen3-MoE's config.json spells its experts, with the
// transformers defaults: num_local_experts or num_experts (128),
// num_experts_per_tok (8), moe_intermediate_size (768), norm_topk_prob
// (false), decoder_sparse_step (1), mlp_only_layers (none).
var Fields = decoder.MoEFields{ExpertKeys: []string{"num_local_experts", "num_experts"}, DefaultExperts: 128, DefaultTopK: 8,
	WidthKey: "moe_intermediate_size", DefaultWidth: 768, NormKey: "norm_topk_prob", Layout: true}

// Spec is Qwen3-MoE's config.json identity (Qwen3MoeForCausalLM, model_type
// qwen3_moe) and what sets it apart; Spec.ParseConfig parses its
// config.json, Spec.New builds a model and Spec.ConfigJSON writes one.
var Spec = decoder.Spec{Architecture: "Qwen3MoeForCausalLM", ModelType: "qwen3_moe", Names: Names, Adjust: adjust, Extra: extra}

// adjust fixes Qwen3's attention knobs (full attention in every layer, no
// biases, q/k norm) and reads the experts.
func adjust(r *loader.Fields, c *decoder.Config) error {
	if err := decoder.FullAttentionOnly(r); err != nil {
		return err
	}
	if err := decoder.NoBias(r, c, "q, k, v and o biases in Qwen3-MoE are not implemented", "Qwen3-MoE's MLPs have no bias"); err != nil {
		return err
	}
	c.QKNorm = true
	return decoder.ReadMoE(r, c, Fields)
}

// extra is what a Qwen3-MoE config.json has beyond the generic fields: full
// attention everywhere, no attention bias, the experts.
func extra(c *decoder.Config) map[string]any {
	m := decoder.FullAttentionJSON(c)
	m["attention_bias"] = false
	for k, v := range decoder.MoEJSON(c, Fields) {
		m[k] = v
	}
	return m
}

// qwen3_30bA3b is Qwen3-30B-A3B's config.json (30.5 B parameters, 3.3 B
// active a token).
var qwen3_30bA3b = decoder.Config{HiddenSize: 2048, IntermediateSize: 6144, NumHiddenLayers: 48, NumAttentionHeads: 32, NumKeyValueHeads: 4,
	HeadDim: 128, VocabSize: 151936, MaxPositionEmbeddings: 40960, RMSNormEps: 1e-6, QKNorm: true,
	Rope: decoder.Rope{Theta: 1e6, Type: "default"}, BOSTokenID: 151643, EOSTokenIDs: []int{151645},
	MoE: decoder.MoE{Experts: 128, TopK: 8, IntermediateSize: 768, NormTopK: true, SparseStep: 1}}

// Shapes are Qwen3-MoE's named shapes for random-weight checkpoints.
var Shapes = map[string]decoder.Config{
	// Qwen3-30B-A3B: 48 layers of 128 experts of 768, top 8, untied.
	"qwen3-30b-a3b": qwen3_30bA3b,
	// Qwen3-30B-A3B cut to 24 of its 48 layers (15.58 B parameters, 31.2 GB
	// in bf16): the full model does not fit the H200 machine's disk next to
	// its pinned copy.
	"qwen3-30b-a3b-24l": func() decoder.Config { c := qwen3_30bA3b; c.NumHiddenLayers = 24; return c }(),
	// A tiny Qwen3-MoE for tests: 16 experts of 32, top 4, renormalised,
	// layer 1 dense (mlp_only_layers).
	"qwen3moe-tiny": {HiddenSize: 64, IntermediateSize: 160, NumHiddenLayers: 3, NumAttentionHeads: 4, NumKeyValueHeads: 2,
		HeadDim: 32, VocabSize: 256, MaxPositionEmbeddings: 512, RMSNormEps: 1e-6, QKNorm: true,
		Rope: decoder.Rope{Theta: 1e6, Type: "default"}, BOSTokenID: 0, EOSTokenIDs: []int{1},
		MoE: decoder.MoE{Experts: 16, TopK: 4, IntermediateSize: 32, NormTopK: true, SparseStep: 1, DenseLayers: []int{1}}},
}

// Family registers Qwen3-MoE with the models registry.
var Family = models.DecoderFamily(Spec, Shapes)

func init() { models.Register(Family) }
