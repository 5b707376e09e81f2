package llama

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"

	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models/decoder"
	rt "github.com/flextensor-go/flextensor/runtime"
)

// Shapes are named model shapes for test checkpoints (MakeCheckpoint).
var Shapes = map[string]Config{
	// Llama-3-8B: 8.03 B parameters, 16.06 GB in BF16.
	"llama3-8b": {Config: decoder.Config{HiddenSize: 4096, IntermediateSize: 14336, NumHiddenLayers: 32, NumAttentionHeads: 32,
		NumKeyValueHeads: 8, HeadDim: 128, VocabSize: 128256, MaxPositionEmbeddings: 8192, RMSNormEps: 1e-5,
		Rope: decoder.Rope{Theta: 500000, Type: "default"}, BOSTokenID: 128000, EOSTokenIDs: []int{128001}}},
	// Llama-3.2-1B's shape (tied embeddings, llama3 rope scaling).
	"llama3-1b": {Config: decoder.Config{HiddenSize: 2048, IntermediateSize: 8192, NumHiddenLayers: 16, NumAttentionHeads: 32,
		NumKeyValueHeads: 8, HeadDim: 64, VocabSize: 128256, MaxPositionEmbeddings: 131072, RMSNormEps: 1e-5,
		TieWordEmbeddings: true, BOSTokenID: 128000, EOSTokenIDs: []int{128001},
		Rope: decoder.Rope{Theta: 500000, Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}}},
	// A small deep model for tests of the offload engine: 12 layers.
	"deep-test": {Config: decoder.Config{HiddenSize: 64, IntermediateSize: 160, NumHiddenLayers: 12, NumAttentionHeads: 4,
		NumKeyValueHeads: 2, HeadDim: 16, VocabSize: 256, MaxPositionEmbeddings: 512, RMSNormEps: 1e-5,
		Rope: decoder.Rope{Theta: 10000, Type: "default"}, BOSTokenID: 0, EOSTokenIDs: []int{1}}},
}

// ShapeNames lists the keys of Shapes, sorted.
func ShapeNames() []string {
	var out []string
	for n := range Shapes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// MakeCheckpoint writes a Hugging Face checkpoint with random BF16 weights
// for cfg into dir: config.json, model-0000k-of-0000n.safetensors shards of
// at most shardBytes, and model.safetensors.index.json. Matrices are uniform
// in ±sqrt(3)·std (std 0.02 scaled by 1/sqrt(width/4096) so activations stay
// in range), norms in [0.5, 1.5). The same seed gives the same bytes. It uses
// every core.
func MakeCheckpoint(dir string, cfg Config, seed uint64, shardBytes int64) error {
	if cfg.HeadDim == 0 && cfg.NumAttentionHeads > 0 {
		cfg.HeadDim = cfg.HiddenSize / cfg.NumAttentionHeads
	}
	m, err := New(&cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeConfig(filepath.Join(dir, "config.json"), &cfg); err != nil {
		return err
	}
	shapes := m.ParamShapes()
	var specs []loader.TensorSpec
	for _, p := range modelParams(m) {
		specs = append(specs, loader.TensorSpec{Name: p, DType: rt.BF16, Shape: shapes[p]})
	}
	return loader.WriteShardedFunc(dir, specs, shardBytes, func(i int, dst []byte) error {
		s := specs[i]
		h := fnv.New64a()
		h.Write([]byte(s.Name))
		fillRandomBF16(dst, seed^h.Sum64(), len(s.Shape) == 1, s.Shape)
		return nil
	})
}

func modelParams(m *Model) []string {
	var out []string
	for name := range m.ParamShapes() {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// fillRandomBF16 fills dst with bf16 values from a splitmix/xorshift stream,
// in 1 MiB chunks spread over the cores.
func fillRandomBF16(dst []byte, seed uint64, norm bool, shape []int) {
	scale := float32(0.02 * 1.7320508)
	if !norm && len(shape) == 2 && shape[1] > 0 {
		w := float32(shape[1]) / 4096
		if w > 0 {
			scale /= float32(sqrt32(w))
		}
	}
	const chunk = 1 << 20
	n := (len(dst) + chunk - 1) / chunk
	workers := min(runtime.GOMAXPROCS(0), n)
	var wg sync.WaitGroup
	next := make(chan int, n)
	for c := 0; c < n; c++ {
		next <- c
	}
	close(next)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range next {
				lo, hi := c*chunk, min((c+1)*chunk, len(dst))
				x := seed ^ (uint64(c)+1)*0x9e3779b97f4a7c15
				for i := lo; i+1 < hi; i += 2 {
					x ^= x << 13
					x ^= x >> 7
					x ^= x << 17
					u := float32(x>>40)/float32(1<<24)*2 - 1 // uniform in [-1, 1)
					var v float32
					if norm {
						v = 1 + u/2
					} else {
						v = u * scale
					}
					binary.LittleEndian.PutUint16(dst[i:], rt.F32ToBF16(v))
				}
			}
		}()
	}
	wg.Wait()
}

func sqrt32(x float32) float32 {
	r := x
	for i := 0; i < 20; i++ {
		r = (r + x/r) / 2
	}
	return r
}

// writeConfig writes cfg as a transformers-5 style config.json.
func writeConfig(path string, c *Config) error {
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
	out := map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama", "dtype": "bfloat16",
		"hidden_size": c.HiddenSize, "intermediate_size": c.IntermediateSize, "num_hidden_layers": c.NumHiddenLayers,
		"num_attention_heads": c.NumAttentionHeads, "num_key_value_heads": c.NumKeyValueHeads, "head_dim": c.HeadDim,
		"vocab_size": c.VocabSize, "max_position_embeddings": c.MaxPositionEmbeddings, "rms_norm_eps": c.RMSNormEps,
		"hidden_act": "silu", "tie_word_embeddings": c.TieWordEmbeddings, "bos_token_id": c.BOSTokenID,
		"eos_token_id": eos, "rope_parameters": rope, "attention_bias": false, "mlp_bias": false,
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
