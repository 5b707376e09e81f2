package loader

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// FuzzSafetensorsHeader feeds arbitrary bytes, as a file, through OpenFile and
// every accessor: none may panic, and an accepted file must be self-consistent.
// The seed corpus is in testdata/fuzz/FuzzSafetensorsHeader.
func FuzzSafetensorsHeader(f *testing.F) {
	f.Add(rawSafetensors(`{"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}`, make([]byte, 8)))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, content []byte) {
		p := filepath.Join(dir, "f.safetensors")
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
		sf, err := OpenFile(p)
		if err != nil {
			return
		}
		defer sf.Close()
		end := int64(8 + binary.LittleEndian.Uint64(content))
		for _, name := range sf.Names() {
			info, err := sf.Info(name)
			if err != nil {
				t.Fatalf("listed tensor %q has no info: %v", name, err)
			}
			if info.Offset < 8 || info.Size < 0 || info.Offset+info.Size > int64(len(content)) {
				t.Fatalf("tensor %q: offset %d size %d outside a %d-byte file", name, info.Offset, info.Size, len(content))
			}
			if info.NumElements()*int64(info.DType.Size()) != info.Size {
				t.Fatalf("tensor %q: shape %v of %v does not give size %d", name, info.Shape, info.DType, info.Size)
			}
			b, err := sf.Bytes(name)
			if err != nil || int64(len(b)) != info.Size {
				t.Fatalf("tensor %q: Bytes gave %d bytes, %v", name, len(b), err)
			}
			dst := make([]byte, info.Size)
			if err := sf.ReadInto(name, dst); err != nil || string(dst) != string(content[info.Offset:info.Offset+info.Size]) {
				t.Fatalf("tensor %q: ReadInto disagrees with the file: %v", name, err)
			}
			end += info.Size
		}
		if end != int64(len(content)) {
			t.Fatalf("accepted tensors cover up to byte %d of a %d-byte file", end, len(content))
		}
	})
}

// FuzzLlamaConfig feeds arbitrary bytes to ParseLlamaConfig: it must not
// panic, and an accepted config must satisfy the invariants it promises.
func FuzzLlamaConfig(f *testing.F) {
	f.Add([]byte(llama31Config))
	if b, err := os.ReadFile(filepath.Join(tinyLlama, "config.json")); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"model_type":"llama","hidden_size":8,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":4,"eos_token_id":[1,2],"rope_parameters":{"rope_type":"llama3","factor":2,"low_freq_factor":1,"high_freq_factor":2,"original_max_position_embeddings":4}}`))
	f.Add([]byte(`{"rope_scaling":{"type":"linear"}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseLlamaConfig(data, "fuzz/config.json")
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
		if !(c.Rope.Theta > 0) {
			t.Fatalf("accepted rope theta %v", c.Rope.Theta)
		}
	})
}
