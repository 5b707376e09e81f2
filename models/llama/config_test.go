package llama

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testfile"
	"github.com/flextensor-go/flextensor/models/decoder"
)

const tinyLlama = tinyDir

// wantErr fails t unless err's text contains every one of parts.
var wantErr = testfile.WantErr

// llama31Config is Llama-3.1-8B's config.json as transformers 4.x writes it.
const llama31Config = `{
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
}`

// parsedLlama is the Config parsed from a bfloat16 LlamaForCausalLM
// config.json with the knobs c.
func parsedLlama(c decoder.Config) *Config {
	return &Config{
		Header: decoder.Header{Architectures: []string{"LlamaForCausalLM"}, ModelType: "llama", HiddenAct: "silu", TorchDType: "bfloat16"},
		Config: c,
	}
}

func TestReadConfigTinyLlama(t *testing.T) {
	c, err := ReadConfig(tinyLlama)
	if err != nil {
		t.Fatal(err)
	}
	want := parsedLlama(decoder.Config{
		HiddenSize: 128, IntermediateSize: 352, NumHiddenLayers: 4, NumAttentionHeads: 4, NumKeyValueHeads: 2,
		HeadDim: 32, VocabSize: 512, MaxPositionEmbeddings: 256, RMSNormEps: 1e-5,
		BOSTokenID: 0, EOSTokenIDs: []int{1}, Rope: decoder.Rope{Theta: 10000, Type: "default"},
	})
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
}

func TestParseConfigLlama31(t *testing.T) {
	c, err := ParseConfig([]byte(llama31Config), "llama31/config.json")
	if err != nil {
		t.Fatal(err)
	}
	want := parsedLlama(decoder.Config{
		HiddenSize: 4096, IntermediateSize: 14336, NumHiddenLayers: 32, NumAttentionHeads: 32, NumKeyValueHeads: 8,
		HeadDim: 128, VocabSize: 128256, MaxPositionEmbeddings: 131072, RMSNormEps: 1e-5,
		BOSTokenID: 128000, EOSTokenIDs: []int{128001, 128008, 128009},
		Rope: decoder.Rope{Theta: 500000, Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192},
	})
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
}

func TestParseConfigRopeFormats(t *testing.T) {
	base := `"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100`
	llama3 := decoder.Rope{Theta: 500000, Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}
	fields := `"factor":8,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":8192`
	for _, tc := range []struct {
		name string
		rope string
		want decoder.Rope
	}{
		{"no rope fields", ``, decoder.Rope{Theta: 10000, Type: "default"}},
		{"v4 theta only", `,"rope_theta":1e6`, decoder.Rope{Theta: 1e6, Type: "default"}},
		{"v4 null scaling", `,"rope_theta":1e6,"rope_scaling":null`, decoder.Rope{Theta: 1e6, Type: "default"}},
		{"v4 llama3", `,"rope_theta":500000,"rope_scaling":{"rope_type":"llama3",` + fields + `}`, llama3},
		{"v4 legacy type key", `,"rope_theta":500000,"rope_scaling":{"type":"llama3",` + fields + `}`, llama3},
		{"v5 default", `,"rope_parameters":{"rope_theta":5e5,"rope_type":"default"}`, decoder.Rope{Theta: 5e5, Type: "default"}},
		{"v5 no type", `,"rope_parameters":{"rope_theta":5e5}`, decoder.Rope{Theta: 5e5, Type: "default"}},
		{"v5 llama3", `,"rope_parameters":{"rope_theta":500000,"rope_type":"llama3",` + fields + `}`, llama3},
		{"v5 wins over v4", `,"rope_theta":1,"rope_parameters":{"rope_theta":500000,"rope_type":"llama3",` + fields + `}`, llama3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte("{"+base+tc.rope+"}"), "c.json")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.Rope, tc.want) {
				t.Errorf("Rope = %+v, want %+v", c.Rope, tc.want)
			}
		})
	}
}

func TestParseConfigDefaults(t *testing.T) {
	c, err := ParseConfig([]byte(`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,
		"num_attention_heads":4,"num_key_value_heads":null,"vocab_size":100,"bos_token_id":null,"eos_token_id":null}`), "c.json")
	if err != nil {
		t.Fatal(err)
	}
	if c.NumKeyValueHeads != 4 || c.HeadDim != 16 || c.RMSNormEps != 1e-6 || c.HiddenAct != "silu" ||
		c.TieWordEmbeddings || c.BOSTokenID != -1 || len(c.EOSTokenIDs) != 0 || c.MaxPositionEmbeddings != 2048 {
		t.Errorf("defaults not applied: %+v", c)
	}
}

func TestReadConfigMissing(t *testing.T) {
	dir := t.TempDir()
	_, err := ReadConfig(dir)
	wantErr(t, err, filepath.Join(dir, "config.json"), "no such file")
}

func TestReadConfigGarbled(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.json")
	os.WriteFile(p, []byte("{\n  \"hidden_size\": 64,\n  \"vocab_size\": 12x\n}"), 0o644)
	_, err := ReadConfig(dir)
	wantErr(t, err, p, "invalid JSON at line 3, column 19", "invalid character 'x'")
}

func TestParseConfigErrors(t *testing.T) {
	// Each case edits the Llama-3.1 config: replace old with new.
	tests := []struct {
		name, old, new string
		want           []string
	}{
		{"unsupported architecture", `["LlamaForCausalLM"]`, `["MistralForCausalLM"]`, []string{"field architectures", "MistralForCausalLM", "not supported"}},
		{"no architecture, wrong model_type", `"model_type": "llama"`, `"model_type": "gpt2", "architectures": null`, []string{"model_type", `"gpt2"`}},
		{"unsupported hidden_act", `"hidden_act": "silu"`, `"hidden_act": "gelu"`, []string{"field hidden_act", `"gelu"`, "only silu"}},
		{"unsupported rope type", `"rope_type": "llama3"`, `"rope_type": "su"`, []string{"field rope_scaling.rope_type", `"su"`, "default, linear, dynamic, yarn, llama3, longrope"}},
		{"yarn's attention factor must be positive", `"rope_type": "llama3"`, `"rope_type": "yarn", "attention_factor": -1`, []string{"rope_scaling.attention_factor", "must be a positive number, got -1"}},
		{"rope needs a numeric factor", `"factor": 8.0`, `"factor": "eight"`, []string{"rope_scaling.factor", `want a number, got "eight"`}},
		{"longrope needs short factors", `"rope_type": "llama3"`, `"rope_type": "longrope"`, []string{"rope_scaling.short_factor", "longrope needs a list of numbers"}},
		{"rope_scaling without type", `"rope_type": "llama3"`, `"other": 1`, []string{"rope_scaling.rope_type", "missing"}},
		{"llama3 missing factor", `"factor": 8.0,`, ``, []string{"rope_scaling.factor", "positive"}},
		{"llama3 high <= low", `"high_freq_factor": 4.0`, `"high_freq_factor": 0.5`, []string{"rope_scaling.high_freq_factor", "must exceed low_freq_factor 1"}},
		{"zero hidden size", `"hidden_size": 4096`, `"hidden_size": 0`, []string{"field hidden_size", "must be positive, got 0"}},
		{"negative layers", `"num_hidden_layers": 32`, `"num_hidden_layers": -2`, []string{"num_hidden_layers", "got -2"}},
		{"missing vocab", `"vocab_size": 128256`, `"x": 1`, []string{"vocab_size", "missing"}},
		{"string size", `"intermediate_size": 14336`, `"intermediate_size": "14336"`, []string{"intermediate_size", "want a number", `"14336"`}},
		{"fractional size", `"intermediate_size": 14336`, `"intermediate_size": 14336.5`, []string{"intermediate_size", "want an integer"}},
		{"heads not divisible", `"num_key_value_heads": 8`, `"num_key_value_heads": 5`, []string{"num_key_value_heads", "32 is not divisible by num_key_value_heads 5"}},
		{"hidden not divisible, no head_dim", `"hidden_size": 4096`, `"hidden_size": 4001`, []string{"head_dim", "4001 is not divisible by num_attention_heads 32"}},
		{"attention bias", `"attention_bias": false`, `"attention_bias": true`, []string{"attention_bias", "not supported"}},
		{"mlp bias", `"mlp_bias": false`, `"mlp_bias": true`, []string{"mlp_bias", "not supported"}},
		{"eos out of vocab", `128009]`, `999999]`, []string{"eos_token_id", "999999"}},
		{"eos not ints", `[128001, 128008, 128009]`, `[128001, "x"]`, []string{"eos_token_id[1]", `"x"`}},
		{"bos a list", `"bos_token_id": 128000`, `"bos_token_id": [1]`, []string{"bos_token_id", "[1]"}},
		{"bad eps", `"rms_norm_eps": 1e-05`, `"rms_norm_eps": -1`, []string{"rms_norm_eps", "-1"}},
		{"bad theta", `"rope_theta": 500000.0`, `"rope_theta": 0`, []string{"rope_theta", "positive"}},
		{"tie not bool", `"tie_word_embeddings": false`, `"tie_word_embeddings": 0`, []string{"tie_word_embeddings", "want true or false"}},
		{"rope_scaling not object", `"rope_scaling": {`, `"rope_scaling": 3, "x": {`, []string{"rope_scaling", "want an object"}},
		{"huge size", `"hidden_size": 4096`, `"hidden_size": 1e300`, []string{"hidden_size", "32 bits"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(llama31Config, tc.old) {
				t.Fatalf("test bug: %q not in the config", tc.old)
			}
			src := strings.Replace(llama31Config, tc.old, tc.new, 1)
			_, err := ParseConfig([]byte(src), "m/config.json")
			wantErr(t, err, append([]string{"m/config.json"}, tc.want...)...)
		})
	}
	for _, bad := range []string{``, `null`, `[1]`, `"x"`, `{`} {
		_, err := ParseConfig([]byte(bad), "m/config.json")
		wantErr(t, err, "m/config.json")
	}
}
