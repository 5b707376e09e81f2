package decoder

import (
	"fmt"
	"math"

	"github.com/flextensor-go/flextensor/loader"
)

// Config holds the knobs every decoder-only transformer of this package is
// built from. A family (models/llama, ...) fills it from its config.json.
// Shapes, with D = HiddenSize, H = NumAttentionHeads, K = NumKeyValueHeads,
// d = HeadDim, I = IntermediateSize: q_proj is [H·d, D], k_proj and v_proj
// [K·d, D], o_proj [D, H·d], gate_proj and up_proj [I, D], down_proj [D, I].
type Config struct {
	HiddenSize            int     // "hidden_size": D, the residual width
	IntermediateSize      int     // "intermediate_size": I, the MLP's inner width
	NumHiddenLayers       int     // "num_hidden_layers"
	NumAttentionHeads     int     // "num_attention_heads": H query heads
	NumKeyValueHeads      int     // "num_key_value_heads": K heads (grouped-query attention); divides H
	HeadDim               int     // "head_dim": d; default D/H
	VocabSize             int     // "vocab_size": V
	MaxPositionEmbeddings int     // "max_position_embeddings"
	RMSNormEps            float64 // "rms_norm_eps"
	Rope                  Rope
	TieWordEmbeddings     bool  // "tie_word_embeddings": lm_head shares embed_tokens
	BOSTokenID            int   // "bos_token_id"; -1 when null or absent
	EOSTokenIDs           []int // "eos_token_id", an int or a list; empty when null or absent

	// The knobs below are what families differ in. New rejects the ones not
	// implemented yet, naming them.

	AttentionBias bool // q, k and v projections have a bias ("bias", [H·d] / [K·d]); o_proj has none (Qwen2)
	MLPBias       bool // the MLP's projections have a bias; not implemented
	QKNorm        bool // per-head RMSNorm of q and k over d before RoPE, weights [d] (Qwen3); Names.QNorm/KNorm
	SlidingWindow int  // the query at position P sees positions P−SlidingWindow+1..P only (Mistral); 0 = all
	MoE           MoE  // mixture of experts (Mixtral, Qwen3-MoE; moe.go); zero for a dense model

	// Quant is the checkpoint's FP8 weight scheme ("quantization_config");
	// zero for full-precision weights.
	Quant Quantization
}

// Rope is the rotary position embedding: from "rope_theta" and
// "rope_scaling" (transformers 4) or "rope_parameters" (transformers 5).
type Rope struct {
	Theta float64 // base of the frequencies, theta^(-2i/d); default 10000
	Type  string  // "default", "linear", "dynamic", "yarn", "llama3" or "longrope"
	// The llama3 frequency rescaling; zero when Type is "default".
	Factor                        float64 // "factor": long wavelengths are divided by it
	LowFreqFactor                 float64 // "low_freq_factor"
	HighFreqFactor                float64 // "high_freq_factor"; greater than LowFreqFactor
	OriginalMaxPositionEmbeddings int     // "original_max_position_embeddings"
	// yarn and longrope (see readRopeScaling).
	BetaFast, BetaSlow float64   // yarn's "beta_fast", "beta_slow"
	NoTruncate         bool      // yarn's "truncate": false
	ShortFactor        []float64 // longrope's "short_factor"
	AttentionFactor    float64   // yarn and longrope: q and k are scaled by it (0 or 1: none)
}

// Validate checks what New relies on: positive sizes, heads divisible by
// key/value heads, a positive finite eps, a sliding window that is not
// negative, and no knob that is not implemented yet.
func (c *Config) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"hidden size", c.HiddenSize}, {"intermediate size", c.IntermediateSize}, {"layers", c.NumHiddenLayers},
		{"attention heads", c.NumAttentionHeads}, {"key/value heads", c.NumKeyValueHeads}, {"head dim", c.HeadDim},
		{"vocabulary size", c.VocabSize}} {
		if f.v <= 0 {
			return fmt.Errorf("decoder config: %s must be positive, got %d", f.name, f.v)
		}
	}
	switch {
	case c.NumAttentionHeads%c.NumKeyValueHeads != 0:
		return fmt.Errorf("decoder config: %d attention heads are not divisible by %d key/value heads", c.NumAttentionHeads, c.NumKeyValueHeads)
	case c.HeadDim%2 != 0:
		return fmt.Errorf("decoder config: head dim %d is odd (RoPE rotates pairs)", c.HeadDim)
	case !(c.RMSNormEps > 0) || math.IsInf(c.RMSNormEps, 0):
		return fmt.Errorf("decoder config: rms norm eps must be a positive number, got %v", c.RMSNormEps)
	case c.MLPBias:
		return fmt.Errorf("decoder config: MLP bias is not implemented")
	case c.SlidingWindow < 0:
		return fmt.Errorf("decoder config: sliding window %d is negative (0 means none)", c.SlidingWindow)
	case c.Quant.Enabled() && (c.Quant.Layout.Block < 0 || c.Quant.ScaleName == ""):
		return fmt.Errorf("decoder config: quantization %v needs a scale name and a block size that is not negative", c.Quant)
	}
	return c.MoE.validate(c.NumHiddenLayers)
}

// ReadConfig reads the generic fields of a transformers config.json with
// the transformers defaults: num_key_value_heads defaults to
// num_attention_heads, head_dim to hidden_size/num_attention_heads,
// max_position_embeddings to 2048, rms_norm_eps to 1e-6, rope as ReadRope.
// It checks what each field alone must satisfy (positive sizes, token ids
// inside the vocabulary, a head_dim that exists); a family checks the rest
// (Validate, its own fields). Errors are recorded in f.
func ReadConfig(f *loader.Fields) Config {
	c := Config{
		HiddenSize:            f.Positive("hidden_size", 0),
		IntermediateSize:      f.Positive("intermediate_size", 0),
		NumHiddenLayers:       f.Positive("num_hidden_layers", 0),
		NumAttentionHeads:     f.Positive("num_attention_heads", 0),
		VocabSize:             f.Positive("vocab_size", 0),
		MaxPositionEmbeddings: f.Positive("max_position_embeddings", 2048),
		RMSNormEps:            f.Float("rms_norm_eps", 1e-6),
		TieWordEmbeddings:     f.Bool("tie_word_embeddings", false),
		BOSTokenID:            f.Int("bos_token_id", -1),
		EOSTokenIDs:           f.Ints("eos_token_id"),
		AttentionBias:         f.Bool("attention_bias", false),
		MLPBias:               f.Bool("mlp_bias", false),
	}
	if f.Err() != nil {
		return c
	}
	c.NumKeyValueHeads = f.Positive("num_key_value_heads", c.NumAttentionHeads)
	if f.Err() == nil && !f.Present("head_dim") && c.HiddenSize%c.NumAttentionHeads != 0 {
		f.Fail(f.Errorf("head_dim", "absent, and hidden_size %d is not divisible by num_attention_heads %d", c.HiddenSize, c.NumAttentionHeads))
		return c
	}
	c.HeadDim = f.Positive("head_dim", c.HiddenSize/max(c.NumAttentionHeads, 1))
	c.Rope = ReadRope(f)
	if f.Err() != nil {
		return c
	}
	if c.Rope.Type == "longrope" { // runs with the short factors: the original context
		c.MaxPositionEmbeddings = min(c.MaxPositionEmbeddings, c.Rope.OriginalMaxPositionEmbeddings)
	}
	c.Quant = ReadQuantization(f)
	if f.Err() != nil {
		return c
	}
	switch {
	case c.NumAttentionHeads%c.NumKeyValueHeads != 0:
		f.Fail(f.Errorf("num_key_value_heads", "num_attention_heads %d is not divisible by num_key_value_heads %d", c.NumAttentionHeads, c.NumKeyValueHeads))
	case !(c.RMSNormEps > 0) || math.IsInf(c.RMSNormEps, 0):
		f.Fail(f.Errorf("rms_norm_eps", "must be a positive number, got %v", c.RMSNormEps))
	case c.BOSTokenID < -1 || c.BOSTokenID >= c.VocabSize || (c.BOSTokenID == -1 && f.Present("bos_token_id")):
		f.Fail(f.Errorf("bos_token_id", "%d is not a token id (vocab_size %d)", c.BOSTokenID, c.VocabSize))
	}
	for _, id := range c.EOSTokenIDs {
		if id < 0 || id >= c.VocabSize {
			f.Fail(f.Errorf("eos_token_id", "%d is not a token id (vocab_size %d)", id, c.VocabSize))
			break
		}
	}
	return c
}

// ReadRope reads the rotary embedding settings from either layout: the
// transformers 4 one (top-level rope_theta, optional rope_scaling with
// rope_type or the legacy type key) or the transformers 5 one
// (rope_parameters). Supported types: default, linear, dynamic, yarn,
// llama3 and longrope (see readRopeScaling); another is an error naming it.
func ReadRope(r *loader.Fields) Rope {
	theta := r.Float("rope_theta", 10000)
	var sub *loader.Fields
	typeKey := "rope_type"
	if p := r.Object("rope_parameters"); p != nil {
		sub = p // transformers 5: everything lives here; rope_type defaults to "default"
		theta = sub.Float("rope_theta", theta)
	} else if s := r.Object("rope_scaling"); s != nil {
		sub = s // transformers 4: rope_type (or legacy type) is required
		if !sub.Present("rope_type") && sub.Present("type") {
			typeKey = "type"
		} else if !sub.Present("rope_type") {
			r.Fail(sub.Errorf("rope_type", "missing"))
			return Rope{}
		}
	}
	rc := Rope{Theta: theta, Type: "default"}
	if !(theta > 0) || math.IsInf(theta, 0) {
		r.Fail(r.Errorf("rope_theta", "must be a positive number, got %v", theta))
		return rc
	}
	if sub == nil {
		return rc
	}
	rc.Type = sub.Str(typeKey, "default")
	r.Fail(sub.Err())
	switch rc.Type {
	case "default":
	case "llama3":
		rc.Factor = sub.Float("factor", math.NaN())
		rc.LowFreqFactor = sub.Float("low_freq_factor", math.NaN())
		rc.HighFreqFactor = sub.Float("high_freq_factor", math.NaN())
		rc.OriginalMaxPositionEmbeddings = sub.Positive("original_max_position_embeddings", 0)
		for _, f := range []struct {
			key string
			v   float64
		}{{"factor", rc.Factor}, {"low_freq_factor", rc.LowFreqFactor}, {"high_freq_factor", rc.HighFreqFactor}} {
			if sub.Err() == nil && (!(f.v > 0) || math.IsInf(f.v, 0)) {
				sub.Fail(sub.Errorf(f.key, "llama3 rope needs a positive number, got %v", f.v))
			}
		}
		if sub.Err() == nil && rc.HighFreqFactor <= rc.LowFreqFactor {
			sub.Fail(sub.Errorf("high_freq_factor", "%v must exceed low_freq_factor %v", rc.HighFreqFactor, rc.LowFreqFactor))
		}
		r.Fail(sub.Err())
	default:
		if !readRopeScaling(r, sub, &rc) {
			r.Fail(sub.Errorf(typeKey, "%q is not supported (supported: %s)", rc.Type, ropeTypes))
		}
		r.Fail(sub.Err())
	}
	return rc
}

// Summary is a one-line description of the shapes, for errors.
func (c *Config) Summary() string {
	s := fmt.Sprintf("hidden %d, intermediate %d, heads %d/%d×%d, vocab %d",
		c.HiddenSize, c.IntermediateSize, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim, c.VocabSize)
	if c.AttentionBias {
		s += ", q/k/v bias"
	}
	if c.QKNorm {
		s += ", q/k norm"
	}
	if c.SlidingWindow > 0 {
		s += fmt.Sprintf(", sliding window %d", c.SlidingWindow)
	}
	if c.MoE.Enabled() {
		s += fmt.Sprintf(", %d experts of %d (top %d)", c.MoE.Experts, c.MoE.IntermediateSize, c.MoE.TopK)
		if c.MoE.Owned != [2]int{} {
			s += fmt.Sprintf(", holding experts %d..%d", c.MoE.Owned[0], c.MoE.Owned[1]-1)
		}
	}
	if c.Quant.Enabled() {
		s += ", " + c.Quant.String()
	}
	return s
}
