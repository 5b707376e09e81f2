package decoder

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/flextensor-go/flextensor/loader"
)

// StandardNames is the tensor-name table transformers' Llama-style decoders
// share (Llama, Mistral, Qwen2, Qwen3): model.embed_tokens,
// model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj,
// self_attn.{q,k}_norm, post_attention_layernorm, mlp.{gate,up,down}_proj},
// model.norm, lm_head. The q/k norm names are used only by configs with
// QKNorm.
var StandardNames = Names{
	Embed: "model.embed_tokens", Layers: "model.layers", Norm: "model.norm", Head: "lm_head",
	InputNorm: "input_layernorm", Attn: "self_attn", PostNorm: "post_attention_layernorm", MLP: "mlp",
	Q: "q_proj", K: "k_proj", V: "v_proj", O: "o_proj", QNorm: "q_norm", KNorm: "k_norm",
	Gate: "gate_proj", Up: "up_proj", Down: "down_proj",
}

// Header is the part of a config.json that says what the checkpoint is.
type Header struct {
	Architectures []string // "architectures"
	ModelType     string   // "model_type"
	HiddenAct     string   // "hidden_act"; default and only value "silu"
	TorchDType    string   // "torch_dtype" (transformers 4) or "dtype" (5), e.g. "bfloat16"; "" when absent
}

// ReadHeader reads the Header and checks that it is the family's: arch among
// the architectures when the list is present, else modelType as model_type,
// and the silu activation. Errors name the field.
func ReadHeader(r *loader.Fields, arch, modelType string) (Header, error) {
	h := Header{
		Architectures: r.Strings("architectures"),
		ModelType:     r.Str("model_type", ""),
		HiddenAct:     r.Str("hidden_act", "silu"),
		TorchDType:    r.Str("torch_dtype", r.Str("dtype", "")),
	}
	if err := r.Err(); err != nil {
		return h, err
	}
	switch {
	case len(h.Architectures) > 0 && !slices.Contains(h.Architectures, arch):
		return h, r.Errorf("architectures", "%q is not supported (want %s)", h.Architectures, arch)
	case len(h.Architectures) == 0 && h.ModelType != modelType:
		return h, r.Errorf("model_type", "%q is not supported (want %s, or architectures [%s])", h.ModelType, modelType, arch)
	case h.HiddenAct != "silu":
		return h, r.Errorf("hidden_act", "%q is not supported (only silu)", h.HiddenAct)
	}
	return h, nil
}

// FullAttentionOnly checks that a config whose family can mix sliding-window
// layers in (Qwen2, Qwen3: use_sliding_window with max_window_layers in
// transformers 4, layer_types in 5) has full attention in every layer, the
// only layout implemented, and that layer_types, where given, has an entry
// a layer. The sliding_window value itself is then unused.
// It returns r's error: the first one recorded, its own or an earlier one.
func FullAttentionOnly(r *loader.Fields) error {
	if r.Bool("use_sliding_window", false) {
		r.Fail(r.Errorf("use_sliding_window", "true is not supported (per-layer sliding windows are not implemented)"))
		return r.Err()
	}
	types := r.Strings("layer_types")
	if n := r.Int("num_hidden_layers", 0); len(types) > 0 && n > 0 && len(types) != n {
		r.Fail(r.Errorf("layer_types", "has %d entries, num_hidden_layers is %d (one a layer)", len(types), n))
		return r.Err()
	}
	for i, t := range types {
		if t != "full_attention" {
			r.Fail(r.Errorf(fmt.Sprintf("layer_types[%d]", i), "%q is not supported (only full_attention)", t))
			break
		}
	}
	return r.Err()
}

// FullAttentionJSON is the config.json fields of the Qwen2/Qwen3 layout
// that say every layer has full attention (what FullAttentionOnly accepts),
// for Spec.Extra.
func FullAttentionJSON(c *Config) map[string]any {
	return map[string]any{"use_sliding_window": false, "sliding_window": nil, "max_window_layers": c.NumHiddenLayers}
}

// ConfigJSON writes c as a transformers-5 config.json for a family's
// architecture and model type: the generic fields with rope_parameters and
// dtype "bfloat16", then extra's fields (which may override them; a nil
// value writes null).
func ConfigJSON(c *Config, arch, modelType string, extra map[string]any) ([]byte, error) {
	rope := map[string]any{"rope_type": c.Rope.Type, "rope_theta": c.Rope.Theta}
	if c.Rope.Type == "llama3" {
		rope["factor"] = c.Rope.Factor
		rope["low_freq_factor"] = c.Rope.LowFreqFactor
		rope["high_freq_factor"] = c.Rope.HighFreqFactor
		rope["original_max_position_embeddings"] = c.Rope.OriginalMaxPositionEmbeddings
	}
	var eos any = c.EOSTokenIDs
	if len(c.EOSTokenIDs) == 1 {
		eos = c.EOSTokenIDs[0]
	}
	var bos any = c.BOSTokenID
	if c.BOSTokenID < 0 {
		bos = nil
	}
	out := map[string]any{
		"architectures": []string{arch}, "model_type": modelType, "dtype": "bfloat16",
		"hidden_size": c.HiddenSize, "intermediate_size": c.IntermediateSize, "num_hidden_layers": c.NumHiddenLayers,
		"num_attention_heads": c.NumAttentionHeads, "num_key_value_heads": c.NumKeyValueHeads, "head_dim": c.HeadDim,
		"vocab_size": c.VocabSize, "max_position_embeddings": c.MaxPositionEmbeddings, "rms_norm_eps": c.RMSNormEps,
		"hidden_act": "silu", "tie_word_embeddings": c.TieWordEmbeddings, "bos_token_id": bos,
		"eos_token_id": eos, "rope_parameters": rope,
	}
	for k, v := range extra {
		out[k] = v
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// FamilyConfig is a family's parsed config.json: the decoder knobs and the
// header (cfg.HiddenSize, cfg.ModelType, ...).
type FamilyConfig struct {
	Config
	Header
}

// Spec is what sets one Llama-style family apart: the config.json names
// that identify it, its tensor names, what it reads or fixes beyond the
// generic fields, and what it writes beyond them. Every family parses,
// builds and writes its config through a Spec, so that the generic steps
// are written once.
type Spec struct {
	Architecture string // config.json "architectures" entry, "LlamaForCausalLM"
	ModelType    string // config.json "model_type", "llama"
	Names        Names  // the checkpoint's tensor names
	// Adjust, when set, reads the family's own fields from r and sets or
	// checks the knobs of c the family fixes (AttentionBias, QKNorm,
	// SlidingWindow, ...). It runs after the generic fields read without
	// error; its errors name the field (r.Errorf).
	Adjust func(r *loader.Fields, c *Config) error
	// Extra, when set, is the family's config.json fields beyond the
	// generic ones (ConfigJSON's extra).
	Extra func(c *Config) map[string]any
}

// ParseConfig parses a config.json of the family in either transformers
// layout (rope_theta and rope_scaling, torch_dtype; or rope_parameters,
// dtype); source names the file in errors. It rejects what ReadHeader and
// ReadConfig reject, then what s.Adjust and Config.Validate do.
func (s Spec) ParseConfig(data []byte, source string) (*FamilyConfig, error) {
	r, err := loader.ParseFields(data, source)
	if err != nil {
		return nil, err
	}
	h, err := ReadHeader(r, s.Architecture, s.ModelType)
	if err != nil {
		return nil, err
	}
	c := &FamilyConfig{Header: h, Config: ReadConfig(r)}
	if err := r.Err(); err != nil {
		return nil, err
	}
	if s.Adjust != nil {
		if err := s.Adjust(r, &c.Config); err != nil {
			return nil, err
		}
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("config %s: %w", source, err)
	}
	return c, nil
}

// ReadConfigFile reads and parses dir/config.json (ParseConfig).
func (s Spec) ReadConfigFile(dir string) (*FamilyConfig, error) {
	data, path, err := loader.ReadConfigFile(dir)
	if err != nil {
		return nil, err
	}
	return s.ParseConfig(data, path)
}

// New builds the module tree for cfg with the family's tensor names and no
// weights bound. With tied embeddings, lm_head shares embed_tokens' weight.
func (s Spec) New(cfg *FamilyConfig) (*Model, error) {
	if cfg == nil {
		return nil, fmt.Errorf("%s.New: nil config", s.ModelType)
	}
	return New(&cfg.Config, s.Names)
}

// Build parses config.json (source names it in errors) and builds the
// model with no weights bound: ParseConfig, then New.
func (s Spec) Build(data []byte, source string) (*Model, error) {
	c, err := s.ParseConfig(data, source)
	if err != nil {
		return nil, err
	}
	return s.New(c)
}

// ConfigJSON writes c as a transformers-5 config.json of the family: the
// generic fields and s.Extra's.
func (s Spec) ConfigJSON(c *Config) ([]byte, error) {
	var extra map[string]any
	if s.Extra != nil {
		extra = s.Extra(c)
	}
	return ConfigJSON(c, s.Architecture, s.ModelType, extra)
}

// NoBias rejects attention_bias and mlp_bias true in c, for a family whose
// projections have none: attn and mlp say why, in the error naming the
// field; an empty reason skips that check.
func NoBias(r *loader.Fields, c *Config, attn, mlp string) error {
	switch {
	case attn != "" && c.AttentionBias:
		return r.Errorf("attention_bias", "true is not supported (%s)", attn)
	case mlp != "" && c.MLPBias:
		return r.Errorf("mlp_bias", "true is not supported (%s)", mlp)
	}
	return nil
}
