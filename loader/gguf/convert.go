package gguf

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"unicode/utf8"

	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/loader/internal/hfllama"
	"github.com/flextensor-go/flextensor/runtime"
)

// Options chooses how ConvertLlama writes the checkpoint.
type Options struct {
	// DType of the written weights: runtime.BF16 (the default when
	// Invalid) or runtime.F32.
	DType runtime.DType
}

// LlamaShape is what ConvertLlama read from the GGUF metadata.
type LlamaShape struct {
	Hidden, Intermediate, Layers, Heads, KVHeads, HeadDim, Vocab, Context int
	RopeTheta, RMSEps                                                     float64
	Tied                                                                  bool // no output.weight: lm_head is the embedding
	Tokenizer                                                             bool // tokenizer.json written
}

// GGUF token types (tokenizer.ggml.token_type).
const (
	tokNormal  = 1
	tokUnknown = 2
	tokControl = 3
	tokByte    = 6
)

// ConvertLlama converts the Llama GGUF checkpoint at path (general.architecture
// "llama"; F32, F16 or BF16 tensors) into a Hugging Face checkpoint in outDir
// (created if missing): config.json, generation_config.json,
// model.safetensors and, for a sentencepiece vocabulary
// (tokenizer.ggml.model "llama"), tokenizer.json.
//
// GGUF keeps llama.cpp's RoPE layout, which rotates interleaved pairs
// (2j, 2j+1) of each head; Hugging Face Llama rotates the halves (j,
// j+head_dim/2), so the rows of each q and k head are permuted: converted
// row a·head_dim/2 + j is GGUF row 2j + a (the inverse of the permutation
// llama.cpp's own Hugging Face import applies).
func ConvertLlama(path, outDir string, opt Options) (LlamaShape, error) {
	dt := opt.DType
	if dt == runtime.Invalid {
		dt = runtime.BF16
	}
	if dt != runtime.BF16 && dt != runtime.F32 {
		return LlamaShape{}, fmt.Errorf("gguf: dtype %s: want BF16 or F32", dt)
	}
	f, err := Open(path)
	if err != nil {
		return LlamaShape{}, err
	}
	if a, err := f.String("general.architecture"); err != nil || a != "llama" {
		return LlamaShape{}, fmt.Errorf("gguf %s: general.architecture %q: only \"llama\" is converted (%v)", path, a, err)
	}
	s, err := llamaShape(f)
	if err != nil {
		return LlamaShape{}, fmt.Errorf("gguf %s: %w", path, err)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return LlamaShape{}, err
	}
	var ts []loader.NamedTensor
	add := func(gname, hname string, shape []int, permuteHeads int) error {
		v, t, err := f.Float32(gname)
		if err != nil {
			return err
		}
		want := 1
		for _, d := range shape {
			if d <= 0 || want > math.MaxInt/d {
				return fmt.Errorf("gguf: tensor %q: shape %v overflows", gname, shape)
			}
			want *= d
		}
		// GGUF dims are innermost first: [in, out] for an [out, in] weight.
		if len(t.Dims) != len(shape) || len(v) != want || int(t.Dims[0]) != shape[len(shape)-1] {
			return fmt.Errorf("gguf: tensor %q has dims %v, want %v (innermost first)", gname, t.Dims, reversed(shape))
		}
		if permuteHeads > 0 {
			v = hfllama.PermuteRoPE(v, permuteHeads, s.HeadDim, shape[1])
		}
		ts = append(ts, loader.NamedTensor{Name: hname, DType: dt, Shape: shape, Data: hfllama.Encode(v, dt)})
		return nil
	}
	h, kv := s.Hidden, s.KVHeads*s.HeadDim
	q := s.Heads * s.HeadDim
	steps := []step{{"token_embd.weight", "model.embed_tokens.weight", []int{s.Vocab, h}, 0}}
	for l := range s.Layers {
		g, p := fmt.Sprintf("blk.%d.", l), fmt.Sprintf("model.layers.%d.", l)
		steps = append(steps,
			step{g + "attn_norm.weight", p + "input_layernorm.weight", []int{h}, 0},
			step{g + "attn_q.weight", p + "self_attn.q_proj.weight", []int{q, h}, s.Heads},
			step{g + "attn_k.weight", p + "self_attn.k_proj.weight", []int{kv, h}, s.KVHeads},
			step{g + "attn_v.weight", p + "self_attn.v_proj.weight", []int{kv, h}, 0},
			step{g + "attn_output.weight", p + "self_attn.o_proj.weight", []int{h, q}, 0},
			step{g + "ffn_norm.weight", p + "post_attention_layernorm.weight", []int{h}, 0},
			step{g + "ffn_gate.weight", p + "mlp.gate_proj.weight", []int{s.Intermediate, h}, 0},
			step{g + "ffn_up.weight", p + "mlp.up_proj.weight", []int{s.Intermediate, h}, 0},
			step{g + "ffn_down.weight", p + "mlp.down_proj.weight", []int{h, s.Intermediate}, 0},
		)
	}
	steps = append(steps, step{"output_norm.weight", "model.norm.weight", []int{h}, 0})
	if !s.Tied {
		steps = append(steps, step{"output.weight", "lm_head.weight", []int{s.Vocab, h}, 0})
	}
	for _, st := range steps {
		if err := add(st.g, st.h, st.shape, st.perm); err != nil {
			return LlamaShape{}, fmt.Errorf("gguf %s: %w", path, err)
		}
	}
	// sentencepiece's ids (llama.cpp's defaults) where the file names none.
	bos, err := f.Int("tokenizer.ggml.bos_token_id")
	if err != nil {
		bos = 1
	}
	eos, err := f.Int("tokenizer.ggml.eos_token_id")
	if err != nil {
		eos = 2
	}
	if bos < 0 || bos >= int64(s.Vocab) || eos < 0 || eos >= int64(s.Vocab) {
		return LlamaShape{}, fmt.Errorf("gguf %s: BOS %d or EOS %d is outside the vocabulary of %d", path, bos, eos, s.Vocab)
	}
	cfg := hfllama.Config{Hidden: s.Hidden, Intermediate: s.Intermediate, Layers: s.Layers, Heads: s.Heads, KVHeads: s.KVHeads,
		HeadDim: s.HeadDim, Vocab: s.Vocab, MaxPositions: s.Context, RMSEps: float32(s.RMSEps), RopeTheta: s.RopeTheta, Tied: s.Tied,
		BOS: bos, EOS: eos, DType: dt}
	if err := hfllama.WriteConfigs(outDir, cfg); err != nil {
		return LlamaShape{}, err
	}
	if tm, _ := f.String("tokenizer.ggml.model"); tm == "llama" {
		tj, err := spmTokenizer(f, int(bos))
		if err != nil {
			return LlamaShape{}, fmt.Errorf("gguf %s: %w", path, err)
		}
		if err := hfllama.WriteJSON(filepath.Join(outDir, "tokenizer.json"), tj); err != nil {
			return LlamaShape{}, err
		}
		s.Tokenizer = true
	}
	meta := map[string]string{"format": "pt", "converted_from": "gguf"}
	if err := loader.WriteFile(filepath.Join(outDir, "model.safetensors"), ts, meta); err != nil {
		return LlamaShape{}, err
	}
	return s, nil
}

// step maps one GGUF tensor to its Hugging Face name and [out, in] shape;
// perm > 0 permutes its rows for RoPE over perm heads.
type step struct {
	g, h  string
	shape []int
	perm  int
}

func reversed(s []int) []int {
	out := make([]int, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}

// maxDim bounds every size read from the metadata (and head count ×
// head dimension), so that shape products stay far from overflow.
const maxDim = 1 << 24

// llamaShape reads the llama.* metadata and checks it against the tensors.
func llamaShape(f *File) (LlamaShape, error) {
	var s LlamaShape
	ints := []struct {
		key string
		dst *int
	}{
		{"llama.embedding_length", &s.Hidden}, {"llama.feed_forward_length", &s.Intermediate},
		{"llama.block_count", &s.Layers}, {"llama.attention.head_count", &s.Heads}, {"llama.context_length", &s.Context},
	}
	for _, x := range ints {
		v, err := f.Int(x.key)
		if err != nil {
			return s, err
		}
		if v <= 0 || v > maxDim {
			return s, fmt.Errorf("metadata %s = %d is out of range", x.key, v)
		}
		*x.dst = int(v)
	}
	// Optional integer keys, range-checked like the required ones: a huge
	// key_length would wrap the shape products below.
	optInt := func(key string, def int) (int, error) {
		v, err := f.Int(key)
		if _, present := f.Metadata[key]; !present {
			return def, nil
		}
		if err != nil {
			return 0, err
		}
		if v <= 0 || v > maxDim {
			return 0, fmt.Errorf("metadata %s = %d is out of range", key, v)
		}
		return int(v), nil
	}
	var err error
	if s.KVHeads, err = optInt("llama.attention.head_count_kv", s.Heads); err != nil {
		return s, err
	}
	if s.Heads%s.KVHeads != 0 || s.Hidden%s.Heads != 0 {
		return s, fmt.Errorf("%d heads, %d key/value heads, hidden size %d: not a Llama attention shape", s.Heads, s.KVHeads, s.Hidden)
	}
	if s.HeadDim, err = optInt("llama.attention.key_length", s.Hidden/s.Heads); err != nil {
		return s, err
	}
	if s.HeadDim%2 != 0 {
		return s, fmt.Errorf("head dimension %d is not even", s.HeadDim)
	}
	if int64(s.Heads)*int64(s.HeadDim) > maxDim {
		return s, fmt.Errorf("head_count %d × key_length %d is over %d", s.Heads, s.HeadDim, maxDim)
	}
	if v, err := f.Int("llama.rope.dimension_count"); err == nil && int(v) != s.HeadDim {
		return s, fmt.Errorf("llama.rope.dimension_count %d is not the head dimension %d (partial rotary is not converted)", v, s.HeadDim)
	}
	s.RopeTheta, s.RMSEps = 10000, 1e-5
	for _, x := range []struct {
		key string
		dst *float64
	}{{"llama.rope.freq_base", &s.RopeTheta}, {"llama.attention.layer_norm_rms_epsilon", &s.RMSEps}} {
		raw, present := f.Metadata[x.key]
		if !present {
			continue
		}
		v, ok := asFloat(raw)
		if !ok || math.IsInf(v, 0) || !(v > 0) {
			return s, fmt.Errorf("metadata %s = %v: want a finite number > 0", x.key, raw)
		}
		*x.dst = v
	}
	if _, ok := f.Metadata["llama.rope.scaling.type"]; ok {
		return s, fmt.Errorf("llama.rope.scaling.type is set: RoPE scaling is not converted")
	}
	// Llama 3.1 GGUFs carry their llama3 RoPE scaling as per-frequency
	// factors in this tensor, without llama.rope.scaling.type; dropping it
	// would give wrong logits at long positions.
	if _, ok := f.Tensor("rope_freqs.weight"); ok {
		return s, fmt.Errorf("tensor rope_freqs.weight is present (llama3 RoPE frequency scaling): RoPE scaling is not converted")
	}
	emb, ok := f.Tensor("token_embd.weight")
	if !ok || len(emb.Dims) != 2 || int(emb.Dims[0]) != s.Hidden {
		return s, fmt.Errorf("token_embd.weight missing or not [vocab, %d]", s.Hidden)
	}
	if emb.Dims[1] == 0 || emb.Dims[1] > maxDim {
		return s, fmt.Errorf("token_embd.weight has a vocabulary of %d (want 1 to %d)", emb.Dims[1], maxDim)
	}
	s.Vocab = int(emb.Dims[1])
	_, hasOut := f.Tensor("output.weight")
	s.Tied = !hasOut
	return s, nil
}

// spmTokenizer builds a Hugging Face tokenizer.json for a sentencepiece BPE
// vocabulary (tokenizer.ggml.model "llama"): pieces with "▁" for spaces,
// "<0xXX>" byte tokens, scores giving the merge order. The merges are every
// split of a normal piece into two normal pieces, ranked by the merged
// piece's score (highest first), which is the order sentencepiece merges in.
func spmTokenizer(f *File, bos int) (map[string]any, error) {
	toks, err := f.Strings("tokenizer.ggml.tokens")
	if err != nil {
		return nil, err
	}
	if bos < 0 || bos >= len(toks) {
		return nil, fmt.Errorf("tokenizer.ggml.tokens has %d tokens, BOS is %d", len(toks), bos)
	}
	scores, err := f.Floats("tokenizer.ggml.scores")
	if err != nil || len(scores) != len(toks) {
		return nil, fmt.Errorf("tokenizer.ggml.scores missing or not one per token (%v)", err)
	}
	types, err := f.Floats("tokenizer.ggml.token_type")
	if err != nil || len(types) != len(toks) {
		return nil, fmt.Errorf("tokenizer.ggml.token_type missing or not one per token (%v)", err)
	}
	vocab := make(map[string]int, len(toks))
	normal := map[string]int{}
	var added []map[string]any
	unk := ""
	for i, t := range toks {
		if !utf8.ValidString(t) {
			return nil, fmt.Errorf("tokenizer.ggml.tokens: token %d %q is not valid UTF-8", i, t)
		}
		if _, dup := vocab[t]; dup {
			return nil, fmt.Errorf("tokenizer.ggml.tokens: %q appears twice", t)
		}
		vocab[t] = i
		switch int(types[i]) {
		case tokNormal:
			normal[t] = i
		case tokUnknown, tokControl:
			if int(types[i]) == tokUnknown {
				unk = t
			}
			added = append(added, map[string]any{"id": i, "content": t, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true})
		}
	}
	type merge struct {
		l, r  string
		rank  int // the merged piece's rank by score
		lrank int // the left piece's rank: ties broken by it
	}
	var merges []merge
	// Rank the pieces by score (descending), ties by id.
	order := make([]int, len(toks))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return scores[order[a]] > scores[order[b]] })
	rank := make([]int, len(toks))
	for r, i := range order {
		rank[i] = r
	}
	for t, id := range normal {
		for k := range t {
			if k == 0 {
				continue
			}
			l, r := t[:k], t[k:]
			li, lok := normal[l]
			_, rok := normal[r]
			if lok && rok { // k is a rune boundary of valid t: l and r are valid
				merges = append(merges, merge{l, r, rank[id], rank[li]})
			}
		}
	}
	sort.Slice(merges, func(a, b int) bool {
		if merges[a].rank != merges[b].rank {
			return merges[a].rank < merges[b].rank
		}
		return merges[a].lrank < merges[b].lrank
	})
	ms := make([]string, len(merges))
	for i, m := range merges {
		ms[i] = m.l + " " + m.r
	}
	var unkTok any // null without an unknown token
	if unk != "" {
		unkTok = unk
	}
	model := map[string]any{"type": "BPE", "dropout": nil, "unk_token": unkTok, "continuing_subword_prefix": nil,
		"end_of_word_suffix": nil, "fuse_unk": true, "byte_fallback": true, "vocab": vocab, "merges": ms}
	bosTok := toks[bos]
	return map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": added,
		"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Prepend", "prepend": "▁"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"},
		}},
		"pre_tokenizer": nil,
		"post_processor": map[string]any{"type": "TemplateProcessing",
			"single": []any{map[string]any{"SpecialToken": map[string]any{"id": bosTok, "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"pair": []any{map[string]any{"SpecialToken": map[string]any{"id": bosTok, "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
				map[string]any{"SpecialToken": map[string]any{"id": bosTok, "type_id": 1}}, map[string]any{"Sequence": map[string]any{"id": "B", "type_id": 1}}},
			"special_tokens": map[string]any{bosTok: map[string]any{"id": bosTok, "ids": []int{bos}, "tokens": []string{bosTok}}},
		},
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
			map[string]any{"type": "ByteFallback"},
			map[string]any{"type": "Fuse"},
			map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0},
		}},
		"model": model,
	}, nil
}
