package all_test

import (
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/models/decoder"
)

// Published config.json files (transformers 4 layout, as on the Hub).
const (
	qwen3_8B = `{"architectures":["Qwen3ForCausalLM"],"attention_bias":false,"attention_dropout":0.0,"bos_token_id":151643,
"eos_token_id":151645,"head_dim":128,"hidden_act":"silu","hidden_size":4096,"initializer_range":0.02,"intermediate_size":12288,
"max_position_embeddings":40960,"max_window_layers":36,"model_type":"qwen3","num_attention_heads":32,"num_hidden_layers":36,
"num_key_value_heads":8,"rms_norm_eps":1e-06,"rope_scaling":null,"rope_theta":1000000,"sliding_window":null,
"tie_word_embeddings":false,"torch_dtype":"bfloat16","transformers_version":"4.51.0","use_cache":true,"use_sliding_window":false,
"vocab_size":151936}`
	qwen25_7B = `{"architectures":["Qwen2ForCausalLM"],"attention_dropout":0.0,"bos_token_id":151643,"eos_token_id":151643,
"hidden_act":"silu","hidden_size":3584,"initializer_range":0.02,"intermediate_size":18944,"max_position_embeddings":131072,
"max_window_layers":28,"model_type":"qwen2","num_attention_heads":28,"num_hidden_layers":28,"num_key_value_heads":4,
"rms_norm_eps":1e-06,"rope_theta":1000000.0,"sliding_window":131072,"tie_word_embeddings":false,"torch_dtype":"bfloat16",
"transformers_version":"4.40.1","use_cache":true,"use_mrope":false,"use_sliding_window":false,"vocab_size":152064}`
	mistral7Bv03 = `{"architectures":["MistralForCausalLM"],"attention_dropout":0.0,"bos_token_id":1,"eos_token_id":2,"hidden_act":"silu",
"hidden_size":4096,"initializer_range":0.02,"intermediate_size":14336,"max_position_embeddings":32768,"model_type":"mistral",
"num_attention_heads":32,"num_hidden_layers":32,"num_key_value_heads":8,"rms_norm_eps":1e-05,"rope_theta":1000000.0,
"sliding_window":null,"tie_word_embeddings":false,"torch_dtype":"bfloat16","transformers_version":"4.42.0.dev0","use_cache":true,
"vocab_size":32768}`
)

func params(m *decoder.Model) int64 {
	var n int64
	for _, s := range m.ParamShapes() {
		n += int64(s.NumElements())
	}
	return n
}

func build(t *testing.T, data []byte, source string) *decoder.Model {
	t.Helper()
	f, err := models.Lookup(data, source)
	if err != nil {
		t.Fatal(err)
	}
	m, err := f.New(data, source)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRealShapes: make-model's real shapes and the published configs they
// stand for build the same network, with the published parameter counts.
func TestRealShapes(t *testing.T) {
	for _, c := range []struct {
		shape, published string
		params           int64
	}{
		{"qwen3-8b", qwen3_8B, 8_190_735_360},
		{"qwen2.5-7b", qwen25_7B, 7_615_616_512},
		{"mistral-7b", mistral7Bv03, 7_248_023_552},
	} {
		t.Run(c.shape, func(t *testing.T) {
			_, data, err := models.ShapeConfig(c.shape, 0)
			if err != nil {
				t.Fatal(err)
			}
			ours, pub := build(t, data, c.shape), build(t, []byte(c.published), "published/config.json")
			if got := params(ours); got != c.params {
				t.Errorf("shape %s has %d parameters, want %d", c.shape, got, c.params)
			}
			if got := params(pub); got != c.params {
				t.Errorf("published config has %d parameters, want %d", got, c.params)
			}
			a, b := ours.Cfg, pub.Cfg
			a.MaxPositionEmbeddings, b.MaxPositionEmbeddings = 0, 0 // base and instruct releases differ
			a.EOSTokenIDs, b.EOSTokenIDs = nil, nil
			if !reflect.DeepEqual([]any{a.Summary(), a.Rope, a.RMSNormEps, a.TieWordEmbeddings, a.BOSTokenID},
				[]any{b.Summary(), b.Rope, b.RMSNormEps, b.TieWordEmbeddings, b.BOSTokenID}) {
				t.Errorf("shape %+v\npublished %+v", a, b)
			}
		})
	}
}

// TestMakeCheckpoint: each tiny shape writes a checkpoint that loads through
// the registry and runs; --layers changes the depth.
func TestMakeCheckpoint(t *testing.T) {
	for _, shape := range []string{"qwen2-tiny", "qwen3-tiny", "mistral-tiny"} {
		t.Run(shape, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), shape)
			if err := models.MakeCheckpoint(dir, shape, 2, 7, 64<<10); err != nil {
				t.Fatal(err)
			}
			ck, err := loader.OpenCheckpoint(dir)
			if err != nil {
				t.Fatal(err)
			}
			shards := len(ck.Files())
			ck.Close()
			if shards < 2 {
				t.Errorf("%d shard(s), want several of at most 64 KiB", shards)
			}
			dev, b := cpu(t)
			m := load(t, dir, dev)
			if len(m.Layers) != 2 {
				t.Errorf("%d layers, want 2", len(m.Layers))
			}
			out, err := m.Generate(b, []int32{3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, decoder.GenerateOptions{MaxNewTokens: 4, IgnoreEOS: true})
			if err != nil || len(out) != 4 {
				t.Fatalf("generate: %v, %v", out, err)
			}
		})
	}
	if err := models.MakeCheckpoint(t.TempDir(), "qwen4-huge", 0, 1, 1<<20); err == nil {
		t.Error("an unknown shape made a checkpoint")
	}
	names := models.ShapeNames()
	for _, want := range []string{"llama3-8b", "qwen3-8b", "qwen2.5-7b", "mistral-7b", "qwen3-tiny", "qwen2-tiny", "mistral-tiny"} {
		if !slices.Contains(names, want) {
			t.Errorf("shape %s missing from %v", want, names)
		}
	}
}
