package hfllama

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestPermuteRoPE: two heads of head dimension 4 over 1 input: each head's
// rows (2j+a) move to a·2 + j, i.e. 0,1,2,3 → 0,2,1,3.
func TestPermuteRoPE(t *testing.T) {
	got := PermuteRoPE([]float32{0, 1, 2, 3, 10, 11, 12, 13}, 2, 4, 1)
	if want := []float32{0, 2, 1, 3, 10, 12, 11, 13}; !slices.Equal(got, want) {
		t.Errorf("PermuteRoPE = %v, want %v", got, want)
	}
}

func TestEncode(t *testing.T) {
	if b := Encode([]float32{1, -2}, runtime.F32); len(b) != 8 || b[3] != 0x3f || b[7] != 0xc0 {
		t.Errorf("F32 encoding %x", b)
	}
	if b := Encode([]float32{1, -2}, runtime.BF16); len(b) != 4 || b[0] != 0x80 || b[1] != 0x3f || b[3] != 0xc0 {
		t.Errorf("BF16 encoding %x", b)
	}
}

func TestWriteConfigs(t *testing.T) {
	dir := t.TempDir()
	c := Config{Hidden: 8, Intermediate: 16, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 4, Vocab: 32, MaxPositions: 64,
		RMSEps: 1e-5, RopeTheta: 10000, Tied: true, BOS: 1, EOS: 2, DType: runtime.F32}
	if err := WriteConfigs(dir, c); err != nil {
		t.Fatal(err)
	}
	var cfg, gen map[string]any
	for p, v := range map[string]*map[string]any{"config.json": &cfg, "generation_config.json": &gen} {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatal(err)
		}
	}
	if cfg["num_key_value_heads"] != 1.0 || cfg["rms_norm_eps"] != 1e-5 || cfg["torch_dtype"] != "float32" || cfg["tie_word_embeddings"] != true {
		t.Errorf("config.json %v", cfg)
	}
	if gen["bos_token_id"] != 1.0 || gen["eos_token_id"] != 2.0 {
		t.Errorf("generation_config.json %v", gen)
	}
}
