package all_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/runtime"
)

// checkpointWith makes a checkpoint directory of config (edited: each pair
// old → new replaced once) and the weights of weightsDir.
func checkpointWith(t *testing.T, configDir, weightsDir string, edits ...string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(configDir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for i := 0; i+1 < len(edits); i += 2 {
		if !strings.Contains(s, edits[i]) {
			t.Fatalf("test bug: %q not in %s/config.json", edits[i], configDir)
		}
		s = strings.Replace(s, edits[i], edits[i+1], 1)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(mustAbs(t, filepath.Join(weightsDir, "model.safetensors")), filepath.Join(dir, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestBadInput: what a family needs and a checkpoint or config gets wrong is
// an error naming it.
func TestBadInput(t *testing.T) {
	const qwen2, qwen3, mistral, llama = "../../testdata/tiny-qwen2", "../../testdata/tiny-qwen3", "../../testdata/tiny-mistral", "../../testdata/tiny-llama"
	for _, c := range []struct {
		name string
		dir  func(t *testing.T) string
		want []string
	}{
		{"qwen3 config over weights without q_norm", func(t *testing.T) string { return checkpointWith(t, qwen3, mistral) },
			[]string{"6 tensors that the config", "q/k norm", "are missing", "model.layers.0.self_attn.k_norm.weight", "model.layers.0.self_attn.q_norm.weight", "and 2 more"}},
		{"qwen2 config over weights without biases", func(t *testing.T) string {
			return checkpointWith(t, qwen2, llama, `"hidden_size": 128`, `"hidden_size": 128, "head_dim": 32`,
				`"intermediate_size": 256`, `"intermediate_size": 352`, `"num_hidden_layers": 3`, `"num_hidden_layers": 4`,
				`"vocab_size": 256`, `"vocab_size": 512`, `"full_attention",`, `"full_attention", "full_attention",`)
		}, []string{"q/k/v bias", "model.layers.0.self_attn.q_proj.bias"}},
		{"mistral sliding_window 0", func(t *testing.T) string {
			return checkpointWith(t, mistral, mistral, `"sliding_window": 8`, `"sliding_window": 0`)
		}, []string{"field sliding_window", "0: want a positive number of positions (null for no window)"}},
		{"mistral sliding_window fractional", func(t *testing.T) string {
			return checkpointWith(t, mistral, mistral, `"sliding_window": 8`, `"sliding_window": 8.5`)
		}, []string{"field sliding_window", "integer"}},
		{"head_dim inconsistent with q_proj", func(t *testing.T) string {
			return checkpointWith(t, mistral, mistral, `"head_dim": 32`, `"head_dim": 16`)
		}, []string{"model.layers.0.self_attn.q_proj.weight has shape [128 64]", "implies [64 64]", "heads 4/2×16"}},
		{"qwen3 head_dim absent", func(t *testing.T) string {
			return checkpointWith(t, qwen3, qwen3, `"head_dim": 32,`, ``)
		}, []string{"q_proj.weight has shape [128 64]", "implies [64 64]"}},
		{"qwen2 sliding-window layers", func(t *testing.T) string {
			return checkpointWith(t, qwen2, qwen2, `"use_sliding_window": false`, `"use_sliding_window": true`)
		}, []string{"field use_sliding_window", "not supported"}},
		{"qwen3 sliding layer type", func(t *testing.T) string {
			return checkpointWith(t, qwen3, qwen3, `"full_attention",`, `"sliding_attention",`)
		}, []string{"field layer_types[0]", `"sliding_attention"`}},
		{"qwen3 layer_types shorter than the layers", func(t *testing.T) string {
			return checkpointWith(t, qwen3, qwen3, `"full_attention",`, ``)
		}, []string{"field layer_types", "has 2 entries, num_hidden_layers is 3"}},
		{"qwen3 attention bias", func(t *testing.T) string {
			return checkpointWith(t, qwen3, qwen3, `"attention_bias": false`, `"attention_bias": true`)
		}, []string{"field attention_bias", "not supported"}},
		{"unknown architecture", func(t *testing.T) string {
			return checkpointWith(t, qwen3, qwen3, `"Qwen3ForCausalLM"`, `"Qwen9ForCausalLM"`)
		}, []string{"Qwen9ForCausalLM", "not supported", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "LlamaForCausalLM"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dev := runtime.NewCPU(0)
			defer dev.Close()
			m, ck, err := models.Load(c.dir(t), dev)
			if err == nil {
				m.Close()
				ck.Close()
				t.Fatalf("loaded; want an error containing %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if n := dev.Memory().InUse; n != 0 {
				t.Errorf("%d bytes left allocated after the error", n)
			}
		})
	}
}
