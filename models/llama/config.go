package llama

import (
	"fmt"
	"slices"

	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models/decoder"
)

// Config is the part of a Hugging Face LlamaForCausalLM config.json the
// executor needs, with the transformers defaults filled in: the generic
// decoder knobs (embedded: cfg.HiddenSize, ...) and the fields only Llama
// checks.
type Config struct {
	decoder.Config
	Architectures []string // "architectures"; contains "LlamaForCausalLM" when non-empty
	ModelType     string   // "model_type" ("llama")
	HiddenAct     string   // "hidden_act"; default and only value "silu"
	TorchDType    string   // "torch_dtype" (transformers 4) or "dtype" (5), e.g. "bfloat16"; "" when absent
}

// Architecture and ModelType identify Llama checkpoints in config.json.
const (
	Architecture = "LlamaForCausalLM"
	ModelType    = "llama"
)

// ReadConfig reads and validates dir/config.json (see ParseConfig).
func ReadConfig(dir string) (*Config, error) {
	data, path, err := loader.ReadConfigFile(dir)
	if err != nil {
		return nil, err
	}
	return ParseConfig(data, path)
}

// ParseConfig parses a config.json for LlamaForCausalLM; source names the
// file in errors. It accepts both the transformers 4 rope layout (top-level
// rope_theta, optional rope_scaling with rope_type or the legacy type key)
// and the transformers 5 one (rope_parameters). It rejects, naming the field
// and value: JSON errors (with line and column), another architecture, an
// activation other than silu, a rope type other than default or llama3,
// non-positive sizes, heads not divisible by key/value heads, and attention
// or MLP biases.
func ParseConfig(data []byte, source string) (*Config, error) {
	r, err := loader.ParseFields(data, source)
	if err != nil {
		return nil, err
	}
	c := &Config{
		Architectures: r.Strings("architectures"),
		ModelType:     r.Str("model_type", ""),
		HiddenAct:     r.Str("hidden_act", "silu"),
		TorchDType:    r.Str("torch_dtype", r.Str("dtype", "")),
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	switch {
	case len(c.Architectures) > 0 && !slices.Contains(c.Architectures, Architecture):
		return nil, r.Errorf("architectures", "%q is not supported (want %s)", c.Architectures, Architecture)
	case len(c.Architectures) == 0 && c.ModelType != ModelType:
		return nil, r.Errorf("model_type", "%q is not supported (want %s, or architectures [%s])", c.ModelType, ModelType, Architecture)
	}
	c.Config = decoder.ReadConfig(r)
	if err := r.Err(); err != nil {
		return nil, err
	}
	switch {
	case c.HiddenAct != "silu":
		return nil, r.Errorf("hidden_act", "%q is not supported (only silu)", c.HiddenAct)
	case c.AttentionBias:
		return nil, r.Errorf("attention_bias", "true is not supported (Llama projections have no bias)")
	case c.MLPBias:
		return nil, r.Errorf("mlp_bias", "true is not supported (Llama projections have no bias)")
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("config %s: %w", source, err)
	}
	return c, nil
}
