package llama

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzConfig feeds arbitrary bytes to ParseConfig: it must not
// panic, and an accepted config must satisfy the invariants it promises.
func FuzzConfig(f *testing.F) {
	f.Add([]byte(llama31Config))
	if b, err := os.ReadFile(filepath.Join(tinyLlama, "config.json")); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"model_type":"llama","hidden_size":8,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":4,"eos_token_id":[1,2],"rope_parameters":{"rope_type":"llama3","factor":2,"low_freq_factor":1,"high_freq_factor":2,"original_max_position_embeddings":4}}`))
	f.Add([]byte(`{"rope_scaling":{"type":"linear"}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data, "fuzz/config.json")
		if err != nil {
			return
		}
		for _, n := range []int{c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers, c.NumAttentionHeads,
			c.NumKeyValueHeads, c.HeadDim, c.VocabSize, c.MaxPositionEmbeddings} {
			if n <= 0 {
				t.Fatalf("accepted a non-positive size: %+v", c)
			}
		}
		if c.NumAttentionHeads%c.NumKeyValueHeads != 0 || c.HiddenAct != "silu" || c.AttentionBias || c.MLPBias || !(c.RMSNormEps > 0) {
			t.Fatalf("accepted an invalid config: %+v", c)
		}
		if c.BOSTokenID < -1 || c.BOSTokenID >= c.VocabSize {
			t.Fatalf("accepted bos %d with vocab %d", c.BOSTokenID, c.VocabSize)
		}
		switch c.Rope.Type {
		case "default":
		case "llama3":
			if !(c.Rope.Factor > 0) || !(c.Rope.HighFreqFactor > c.Rope.LowFreqFactor) || c.Rope.OriginalMaxPositionEmbeddings <= 0 {
				t.Fatalf("accepted bad llama3 rope: %+v", c.Rope)
			}
		default:
			t.Fatalf("accepted rope type %q", c.Rope.Type)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted a config the decoder rejects: %v", err)
		}
		if !(c.Rope.Theta > 0) {
			t.Fatalf("accepted rope theta %v", c.Rope.Theta)
		}
	})
}
