package loader

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// ConfigFileName is the name of a Hugging Face model configuration file.
const ConfigFileName = "config.json"

// LlamaConfig is the part of a Hugging Face LlamaForCausalLM config.json the
// executor needs, with the transformers defaults filled in. Shapes, with
// d = HiddenSize, h = NumAttentionHeads, k = NumKeyValueHeads, e = HeadDim:
// q_proj is [h*e, d], k_proj and v_proj [k*e, d], o_proj [d, h*e].
type LlamaConfig struct {
	Architectures         []string // "architectures"; contains "LlamaForCausalLM" when non-empty
	ModelType             string   // "model_type" ("llama")
	HiddenSize            int      // "hidden_size": d, the residual width
	IntermediateSize      int      // "intermediate_size": the MLP's inner width
	NumHiddenLayers       int      // "num_hidden_layers"
	NumAttentionHeads     int      // "num_attention_heads": h query heads
	NumKeyValueHeads      int      // "num_key_value_heads": k heads (grouped-query attention); default h; divides h
	HeadDim               int      // "head_dim": e; default d/h
	VocabSize             int      // "vocab_size"
	MaxPositionEmbeddings int      // "max_position_embeddings"; default 2048
	RMSNormEps            float64  // "rms_norm_eps"; default 1e-6
	HiddenAct             string   // "hidden_act"; default and only value "silu"
	TieWordEmbeddings     bool     // "tie_word_embeddings": lm_head shares embed_tokens; default false
	BOSTokenID            int      // "bos_token_id"; -1 when null or absent
	EOSTokenIDs           []int    // "eos_token_id", an int or a list; empty when null or absent
	Rope                  RopeConfig
	TorchDType            string // "torch_dtype" (transformers 4) or "dtype" (5), e.g. "bfloat16"; "" when absent
	AttentionBias         bool   // "attention_bias"; always false (true is rejected)
	MLPBias               bool   // "mlp_bias"; always false (true is rejected)
}

// RopeConfig is the rotary position embedding: from "rope_theta" and
// "rope_scaling" (transformers 4) or "rope_parameters" (transformers 5).
type RopeConfig struct {
	Theta float64 // base of the frequencies, theta^(-2i/e); default 10000
	Type  string  // "default" or "llama3"
	// The llama3 frequency rescaling; zero when Type is "default".
	Factor                        float64 // "factor": long wavelengths are divided by it
	LowFreqFactor                 float64 // "low_freq_factor"
	HighFreqFactor                float64 // "high_freq_factor"; greater than LowFreqFactor
	OriginalMaxPositionEmbeddings int     // "original_max_position_embeddings"
}

// ReadLlamaConfig reads and validates dir/config.json (see ParseLlamaConfig).
func ReadLlamaConfig(dir string) (*LlamaConfig, error) {
	path := filepath.Join(dir, ConfigFileName)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("llama config: %w", err)
	}
	return ParseLlamaConfig(data, path)
}

// ParseLlamaConfig parses a config.json for LlamaForCausalLM; source names
// the file in errors. It accepts both the transformers 4 rope layout
// (top-level rope_theta, optional rope_scaling with rope_type or the legacy
// type key) and the transformers 5 one (rope_parameters). It rejects, naming
// the field and value: JSON errors (with line and column), another
// architecture, an activation other than silu, a rope type other than default
// or llama3, non-positive sizes, heads not divisible by key/value heads, and
// attention or MLP biases.
func ParseLlamaConfig(data []byte, source string) (*LlamaConfig, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("config %s: %w", source, describeJSONError(data, err))
	}
	if top == nil {
		return nil, fmt.Errorf("config %s: want a JSON object, got null", source)
	}
	r := &fieldReader{src: source, m: top}
	c := &LlamaConfig{
		Architectures:         r.strings("architectures"),
		ModelType:             r.str("model_type", ""),
		HiddenSize:            r.positive("hidden_size", 0),
		IntermediateSize:      r.positive("intermediate_size", 0),
		NumHiddenLayers:       r.positive("num_hidden_layers", 0),
		NumAttentionHeads:     r.positive("num_attention_heads", 0),
		VocabSize:             r.positive("vocab_size", 0),
		MaxPositionEmbeddings: r.positive("max_position_embeddings", 2048),
		RMSNormEps:            r.float("rms_norm_eps", 1e-6),
		HiddenAct:             r.str("hidden_act", "silu"),
		TieWordEmbeddings:     r.boolean("tie_word_embeddings", false),
		BOSTokenID:            r.integer("bos_token_id", -1),
		EOSTokenIDs:           r.ints("eos_token_id"),
		TorchDType:            r.str("torch_dtype", r.str("dtype", "")),
		AttentionBias:         r.boolean("attention_bias", false),
		MLPBias:               r.boolean("mlp_bias", false),
	}
	if r.err != nil {
		return nil, r.err
	}
	c.NumKeyValueHeads = r.positive("num_key_value_heads", c.NumAttentionHeads)
	if r.err == nil && !r.present("head_dim") && c.HiddenSize%c.NumAttentionHeads != 0 {
		return nil, r.errorf("head_dim", "absent, and hidden_size %d is not divisible by num_attention_heads %d", c.HiddenSize, c.NumAttentionHeads)
	}
	c.HeadDim = r.positive("head_dim", c.HiddenSize/max(c.NumAttentionHeads, 1))
	c.Rope = r.rope()
	if r.err != nil {
		return nil, r.err
	}

	switch {
	case len(c.Architectures) > 0 && !slices.Contains(c.Architectures, "LlamaForCausalLM"):
		return nil, r.errorf("architectures", "%q is not supported (want LlamaForCausalLM)", c.Architectures)
	case len(c.Architectures) == 0 && c.ModelType != "llama":
		return nil, r.errorf("model_type", "%q is not supported (want llama, or architectures [LlamaForCausalLM])", c.ModelType)
	case c.HiddenAct != "silu":
		return nil, r.errorf("hidden_act", "%q is not supported (only silu)", c.HiddenAct)
	case c.NumAttentionHeads%c.NumKeyValueHeads != 0:
		return nil, r.errorf("num_key_value_heads", "num_attention_heads %d is not divisible by num_key_value_heads %d", c.NumAttentionHeads, c.NumKeyValueHeads)
	case !(c.RMSNormEps > 0) || math.IsInf(c.RMSNormEps, 0):
		return nil, r.errorf("rms_norm_eps", "must be a positive number, got %v", c.RMSNormEps)
	case c.AttentionBias:
		return nil, r.errorf("attention_bias", "true is not supported (Llama projections have no bias)")
	case c.MLPBias:
		return nil, r.errorf("mlp_bias", "true is not supported (Llama projections have no bias)")
	case c.BOSTokenID < -1 || c.BOSTokenID >= c.VocabSize || (c.BOSTokenID == -1 && r.present("bos_token_id")):
		return nil, r.errorf("bos_token_id", "%d is not a token id (vocab_size %d)", c.BOSTokenID, c.VocabSize)
	}
	for _, id := range c.EOSTokenIDs {
		if id < 0 || id >= c.VocabSize {
			return nil, r.errorf("eos_token_id", "%d is not a token id (vocab_size %d)", id, c.VocabSize)
		}
	}
	return c, nil
}

// rope reads the rotary embedding settings from either layout.
func (r *fieldReader) rope() RopeConfig {
	theta := r.float("rope_theta", 10000)
	var sub *fieldReader
	typeKey := "rope_type"
	if p := r.object("rope_parameters"); p != nil {
		sub = p // transformers 5: everything lives here; rope_type defaults to "default"
		theta = sub.float("rope_theta", theta)
	} else if s := r.object("rope_scaling"); s != nil {
		sub = s // transformers 4: rope_type (or legacy type) is required
		if !sub.present("rope_type") && sub.present("type") {
			typeKey = "type"
		} else if !sub.present("rope_type") {
			r.fail(sub.errorf("rope_type", "missing"))
			return RopeConfig{}
		}
	}
	rc := RopeConfig{Theta: theta, Type: "default"}
	if !(theta > 0) || math.IsInf(theta, 0) {
		r.fail(r.errorf("rope_theta", "must be a positive number, got %v", theta))
		return rc
	}
	if sub == nil {
		return rc
	}
	rc.Type = sub.str(typeKey, "default")
	r.fail(sub.err)
	switch rc.Type {
	case "default":
	case "llama3":
		rc.Factor = sub.float("factor", math.NaN())
		rc.LowFreqFactor = sub.float("low_freq_factor", math.NaN())
		rc.HighFreqFactor = sub.float("high_freq_factor", math.NaN())
		rc.OriginalMaxPositionEmbeddings = sub.positive("original_max_position_embeddings", 0)
		for _, f := range []struct {
			key string
			v   float64
		}{{"factor", rc.Factor}, {"low_freq_factor", rc.LowFreqFactor}, {"high_freq_factor", rc.HighFreqFactor}} {
			if sub.err == nil && (!(f.v > 0) || math.IsInf(f.v, 0)) {
				sub.fail(sub.errorf(f.key, "llama3 rope needs a positive number, got %v", f.v))
			}
		}
		if sub.err == nil && rc.HighFreqFactor <= rc.LowFreqFactor {
			sub.fail(sub.errorf("high_freq_factor", "%v must exceed low_freq_factor %v", rc.HighFreqFactor, rc.LowFreqFactor))
		}
		r.fail(sub.err)
	default:
		r.fail(sub.errorf(typeKey, "%q is not supported (supported: default, llama3)", rc.Type))
	}
	return rc
}

// fieldReader decodes fields of one JSON object, keeping the first error
// (which names the source and the field's dotted path).
type fieldReader struct {
	src    string
	prefix string // "" at top level, "rope_scaling." inside
	m      map[string]json.RawMessage
	err    error
}

func (r *fieldReader) fail(err error) {
	if r.err == nil && err != nil {
		r.err = err
	}
}

func (r *fieldReader) errorf(key, format string, args ...any) error {
	return fmt.Errorf("config %s: field %s: %s", r.src, r.prefix+key, fmt.Sprintf(format, args...))
}

// raw is the field's JSON text, or nil when it is absent or null.
func (r *fieldReader) raw(key string) []byte {
	v := bytes.TrimSpace(r.m[key])
	if len(v) == 0 || string(v) == "null" {
		return nil
	}
	return v
}

func (r *fieldReader) present(key string) bool { return r.raw(key) != nil }

// number parses a JSON number field.
func (r *fieldReader) number(key string, v []byte) (float64, bool) {
	if v[0] != '-' && (v[0] < '0' || v[0] > '9') {
		r.fail(r.errorf(key, "want a number, got %s", clip(v)))
		return 0, false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		r.fail(r.errorf(key, "number %s out of range", clip(v)))
		return 0, false
	}
	return f, true
}

func (r *fieldReader) integer(key string, def int) int {
	v := r.raw(key)
	if v == nil {
		return def
	}
	n, ok := r.intValue(key, v)
	if !ok {
		return def
	}
	return n
}

// intValue parses a JSON integer (a whole-valued number such as 8.0 is
// accepted) of at most 32 bits, so that products of two sizes fit an int64.
func (r *fieldReader) intValue(key string, v []byte) (int, bool) {
	f, ok := r.number(key, v)
	if !ok {
		return 0, false
	}
	if f != math.Trunc(f) || f < math.MinInt32 || f > math.MaxInt32 {
		r.fail(r.errorf(key, "want an integer of at most 32 bits, got %s", clip(v)))
		return 0, false
	}
	return int(f), true
}

// positive reads an integer that must be > 0; def == 0 makes it required.
func (r *fieldReader) positive(key string, def int) int {
	if def == 0 && !r.present(key) {
		r.fail(r.errorf(key, "missing"))
		return 0
	}
	n := r.integer(key, def)
	if n <= 0 {
		r.fail(r.errorf(key, "must be positive, got %d", n))
	}
	return n
}

func (r *fieldReader) float(key string, def float64) float64 {
	v := r.raw(key)
	if v == nil {
		return def
	}
	f, ok := r.number(key, v)
	if !ok {
		return def
	}
	return f
}

func (r *fieldReader) str(key, def string) string {
	v := r.raw(key)
	if v == nil {
		return def
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		r.fail(r.errorf(key, "want a string, got %s", clip(v)))
		return def
	}
	return s
}

func (r *fieldReader) boolean(key string, def bool) bool {
	switch v := r.raw(key); string(v) {
	case "":
		return def
	case "true":
		return true
	case "false":
		return false
	default:
		r.fail(r.errorf(key, "want true or false, got %s", clip(v)))
		return def
	}
}

func (r *fieldReader) strings(key string) []string {
	v := r.raw(key)
	if v == nil {
		return nil
	}
	var s []string
	if err := json.Unmarshal(v, &s); err != nil {
		r.fail(r.errorf(key, "want a list of strings, got %s", clip(v)))
		return nil
	}
	return s
}

// ints reads an integer or a list of integers.
func (r *fieldReader) ints(key string) []int {
	v := r.raw(key)
	if v == nil {
		return nil
	}
	if v[0] != '[' {
		if n, ok := r.intValue(key, v); ok {
			return []int{n}
		}
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(v, &items); err != nil {
		r.fail(r.errorf(key, "want an integer or a list of integers, got %s", clip(v)))
		return nil
	}
	out := make([]int, len(items))
	for i, it := range items {
		n, ok := r.intValue(fmt.Sprintf("%s[%d]", key, i), bytes.TrimSpace(it))
		if !ok {
			return nil
		}
		out[i] = n
	}
	return out
}

// object returns a reader over an object field, or nil when the field is
// absent, null, or not an object (the last is recorded as an error).
func (r *fieldReader) object(key string) *fieldReader {
	v := r.raw(key)
	if v == nil {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(v, &m); err != nil {
		r.fail(r.errorf(key, "want an object, got %s", clip(v)))
		return nil
	}
	return &fieldReader{src: r.src, prefix: r.prefix + key + ".", m: m}
}

// clip shortens a JSON value for an error message.
func clip(v []byte) string {
	if len(v) > 60 {
		return string(v[:57]) + "..."
	}
	return string(v)
}

// describeJSONError adds the line and column of a syntax or type error.
func describeJSONError(data []byte, err error) error {
	var off int64 = -1
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		off = syn.Offset - 1 // Offset counts the offending byte
		if off < 0 {
			off = 0
		}
	case errors.As(err, &typ):
		off = typ.Offset
	}
	if off < 0 || off > int64(len(data)) {
		return fmt.Errorf("invalid JSON: %w", err)
	}
	line, col := 1, 1
	for _, b := range data[:off] {
		if b == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return fmt.Errorf("invalid JSON at line %d, column %d (byte %d): %w", line, col, off, err)
}
