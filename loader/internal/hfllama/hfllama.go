// Package hfllama holds what the converters into a Hugging Face Llama
// checkpoint directory share (loader/gguf, loader/llama2c): the RoPE row
// permutation from interleaved pairs to halves, weight encoding, and the
// config.json / generation_config.json they write.
package hfllama

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"

	"github.com/flextensor-go/flextensor/runtime"
)

// PermuteRoPE returns w ([heads·hd, in] row-major) with each head's rows
// reordered from interleaved RoPE pairs (2j, 2j+1) to Hugging Face's halves
// (j, j+hd/2): converted row a·hd/2 + j is row 2j + a. The caller checks
// that len(w) is heads·hd·in.
func PermuteRoPE(w []float32, heads, hd, in int) []float32 {
	out := make([]float32, len(w))
	for h := range heads {
		for j := range hd / 2 {
			for a := range 2 {
				src := (h*hd + 2*j + a) * in
				dst := (h*hd + a*hd/2 + j) * in
				copy(out[dst:dst+in], w[src:src+in])
			}
		}
	}
	return out
}

// Encode returns v as little-endian runtime.F32, or runtime.BF16 for any
// other dt (the converters accept only those two).
func Encode(v []float32, dt runtime.DType) []byte {
	if dt == runtime.F32 {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		return b
	}
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], runtime.F32ToBF16(x))
	}
	return b
}

// Config is the shape and settings of a converted Llama checkpoint.
type Config struct {
	Hidden, Intermediate, Layers, Heads, KVHeads, HeadDim, Vocab, MaxPositions int
	RMSEps                                                                     float32
	RopeTheta                                                                  float64
	Tied                                                                       bool // lm_head is the token embedding
	BOS, EOS                                                                   int64
	DType                                                                      runtime.DType // runtime.BF16 or runtime.F32
}

// Map is c as config.json's fields.
func (c Config) Map() map[string]any {
	name := "bfloat16"
	if c.DType == runtime.F32 {
		name = "float32"
	}
	return map[string]any{
		"architectures":           []string{"LlamaForCausalLM"},
		"model_type":              "llama",
		"hidden_size":             c.Hidden,
		"intermediate_size":       c.Intermediate,
		"num_hidden_layers":       c.Layers,
		"num_attention_heads":     c.Heads,
		"num_key_value_heads":     c.KVHeads,
		"head_dim":                c.HeadDim,
		"vocab_size":              c.Vocab,
		"max_position_embeddings": c.MaxPositions,
		"rms_norm_eps":            c.RMSEps,
		"rope_theta":              c.RopeTheta,
		"hidden_act":              "silu",
		"tie_word_embeddings":     c.Tied,
		"attention_bias":          false,
		"mlp_bias":                false,
		"bos_token_id":            c.BOS,
		"eos_token_id":            c.EOS,
		"torch_dtype":             name,
	}
}

// WriteConfigs writes dir/config.json and dir/generation_config.json (the
// BOS and EOS ids) for c.
func WriteConfigs(dir string, c Config) error {
	if err := WriteJSON(filepath.Join(dir, "config.json"), c.Map()); err != nil {
		return err
	}
	return WriteJSON(filepath.Join(dir, "generation_config.json"), map[string]any{"bos_token_id": c.BOS, "eos_token_id": c.EOS})
}

// WriteJSON writes v to path as indented JSON ending in a newline.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
