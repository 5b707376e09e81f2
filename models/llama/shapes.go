package llama

import (
	"sort"

	"github.com/flextensor-go/flextensor/models/decoder"
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
// for cfg into dir: config.json (the transformers 5 layout),
// model-0000k-of-0000n.safetensors shards of at most shardBytes, and
// model.safetensors.index.json (decoder.WriteRandomCheckpoint). The same
// seed gives the same bytes.
func MakeCheckpoint(dir string, cfg Config, seed uint64, shardBytes int64) error {
	if cfg.HeadDim == 0 && cfg.NumAttentionHeads > 0 {
		cfg.HeadDim = cfg.HiddenSize / cfg.NumAttentionHeads
	}
	m, err := New(&cfg)
	if err != nil {
		return err
	}
	data, err := Spec.ConfigJSON(&cfg.Config)
	if err != nil {
		return err
	}
	return decoder.WriteRandomCheckpoint(dir, m, data, seed, shardBytes)
}

// decoderShapes are Shapes' decoder knobs, for the models registry (infer
// make-model).
func decoderShapes() map[string]decoder.Config {
	out := make(map[string]decoder.Config, len(Shapes))
	for n, c := range Shapes {
		out[n] = c.Config
	}
	return out
}
