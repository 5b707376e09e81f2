package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models/decoder"
)

// checkMakeModelOut refuses an --out that already holds files, unless force,
// which first removes the checkpoint files there (config.json, tokenizer.json,
// *.safetensors and their index) so that no stale shard of an earlier
// checkpoint outlives it.
func checkMakeModelOut(out string, force bool) error {
	entries, err := os.ReadDir(out)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("--out %s: %w", out, err)
	}
	if len(entries) == 0 {
		return nil
	}
	if !force {
		return usagef("--out %s already holds %d files (%s...): give an empty or new directory, or --force to replace the checkpoint there", out, len(entries), entries[0].Name())
	}
	for _, e := range entries {
		n := e.Name()
		if n == loader.ConfigFileName || n == "tokenizer.json" || n == loader.IndexFileName || strings.HasSuffix(n, ".safetensors") {
			if err := os.Remove(filepath.Join(out, n)); err != nil {
				return fmt.Errorf("--force: %w", err)
			}
		}
	}
	return nil
}

// shapeSize is the parameter count and BF16 bytes of m (built with no
// weights bound).
func shapeSize(m *decoder.Model) (params, bytes int64) {
	for _, s := range m.ParamShapes() {
		params += int64(s.NumElements())
	}
	return params, 2 * params
}

// byteLevelTokenizer writes dir/tokenizer.json: a byte-level BPE tokenizer
// (as Llama 3's) whose vocabulary is exactly [0, vocab): the 256 bytes,
// then generated merges (every pair of bytes, then longer strings) up to the
// first special id, then special tokens (bos, eos, reserved) to the end, so
// that every id a random model generates decodes. It returns false, writing
// nothing, when the ids do not allow it (a vocabulary under 256 + specials,
// or a bos/eos id below 256).
func byteLevelTokenizer(dir string, vocab, bos int, eos []int) (bool, error) {
	first := vocab
	for _, id := range append([]int{bos}, eos...) {
		if id >= 0 {
			first = min(first, id)
		}
	}
	if first < 256 || vocab <= 256 {
		return false, nil
	}
	alphabet := byteAlphabet()
	vocabMap := make(map[string]int, vocab)
	var tokens []string
	for i, s := range alphabet {
		vocabMap[s] = i
		tokens = append(tokens, s)
	}
	var merges [][2]string
	// Grow strings by one byte at a time: pairs of bytes first, then each
	// pair with another byte, and so on, until the merges fill [256, first).
	for level := 0; len(tokens) < first; level++ {
		base := tokens[:len(tokens):len(tokens)]
		if level == 0 {
			base = tokens[:256]
		}
		for _, a := range base {
			if len([]rune(a)) != level+1 {
				continue
			}
			for _, b := range alphabet {
				if len(tokens) >= first {
					break
				}
				s := a + b
				if _, dup := vocabMap[s]; dup {
					continue
				}
				vocabMap[s] = len(tokens)
				tokens = append(tokens, s)
				merges = append(merges, [2]string{a, b})
			}
			if len(tokens) >= first {
				break
			}
		}
	}
	type added struct {
		ID         int    `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	}
	var specials []added
	bosName := ""
	for id := first; id < vocab; id++ {
		name := fmt.Sprintf("<|reserved_special_token_%d|>", id-first)
		switch {
		case id == bos:
			name = "<|begin_of_text|>"
			bosName = name
		case len(eos) > 0 && id == eos[0]:
			name = "<|end_of_text|>"
		}
		specials = append(specials, added{ID: id, Content: name, Special: true})
		vocabMap[name] = id
	}
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
	tok := map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": specials, "normalizer": nil,
		"pre_tokenizer": byteLevel, "decoder": byteLevel,
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocabMap, "merges": merges},
		"post_processor": nil,
	}
	if bosName != "" {
		tok["post_processor"] = map[string]any{
			"type":           "TemplateProcessing",
			"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": bosName, "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"pair":           []any{map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "B", "type_id": 1}}},
			"special_tokens": map[string]any{bosName: map[string]any{"id": bosName, "ids": []int{bos}, "tokens": []string{bosName}}},
		}
	}
	data, err := json.Marshal(tok)
	if err != nil {
		return false, err
	}
	return true, os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o644)
}

// byteAlphabet is GPT-2's byte-to-character table (byte-level BPE): the
// printable Latin-1 bytes stand for themselves, the others for the
// characters from U+0100 on, in byte order.
func byteAlphabet() []string {
	out := make([]string, 256)
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			out[b] = string(rune(b))
		} else {
			out[b] = string(rune(256 + n))
			n++
		}
	}
	return out
}
