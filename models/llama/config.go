package llama

import (
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models/decoder"
)

// Config is the part of a Hugging Face LlamaForCausalLM config.json the
// executor needs, with the transformers defaults filled in: the generic
// decoder knobs (embedded: cfg.HiddenSize, ...) and the header
// (cfg.Architectures, cfg.ModelType, cfg.HiddenAct, cfg.TorchDType).
type Config = decoder.FamilyConfig

// Architecture and ModelType identify Llama checkpoints in config.json.
const (
	Architecture = "LlamaForCausalLM"
	ModelType    = "llama"
)

// Spec is what sets Llama apart from the other Llama-style families: its
// tensor names and no biases.
var Spec = decoder.Spec{Architecture: Architecture, ModelType: ModelType, Names: Names, Adjust: adjust, Extra: extra}

// ReadConfig reads and validates dir/config.json (see ParseConfig).
func ReadConfig(dir string) (*Config, error) { return Spec.ReadConfigFile(dir) }

// ParseConfig parses a config.json for LlamaForCausalLM; source names the
// file in errors. It accepts both the transformers 4 rope layout (top-level
// rope_theta, optional rope_scaling with rope_type or the legacy type key)
// and the transformers 5 one (rope_parameters). It rejects, naming the field
// and value: JSON errors (with line and column), another architecture, an
// activation other than silu, a rope type other than default or llama3,
// non-positive sizes, heads not divisible by key/value heads, and attention
// or MLP biases.
func ParseConfig(data []byte, source string) (*Config, error) { return Spec.ParseConfig(data, source) }

// adjust rejects biases: Llama's projections have none.
func adjust(r *loader.Fields, c *decoder.Config) error {
	const why = "Llama projections have no bias"
	return decoder.NoBias(r, c, why, why)
}

// extra is what a Llama config.json has beyond the generic fields.
func extra(*decoder.Config) map[string]any {
	return map[string]any{"attention_bias": false, "mlp_bias": false}
}
