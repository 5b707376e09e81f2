package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/flextensor-go/flextensor/models/tokenizer"
)

// loadTokenizer reads tokenizer.json from path (a file) or from a model
// directory.
func loadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "tokenizer.json")
	}
	tok, err := tokenizer.Load(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no tokenizer at %s (text prompts need the checkpoint's tokenizer.json; --token-ids works without one)", path)
	}
	return tok, err
}

// llama3Chat is the Llama 3 instruct format for one user turn, ending where
// the assistant's reply begins.
const llama3Chat = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n%s<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"

// chatPrompt wraps text in the checkpoint's chat format. It supports the
// Llama 3 instruct format, recognised from tokenizer_config.json's
// chat_template or, without one, from the tokenizer's header tokens; it
// returns the ids that end a turn (<|eot_id|>).
func chatPrompt(dir string, tok *tokenizer.Tokenizer, text string) (string, []int32, error) {
	template := ""
	if data, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json")); err == nil {
		var tc struct {
			ChatTemplate any `json:"chat_template"`
		}
		if json.Unmarshal(data, &tc) == nil {
			template = fmt.Sprint(tc.ChatTemplate)
		}
	}
	_, hasHeader := tok.TokenID("<|start_header_id|>")
	eot, hasEOT := tok.TokenID("<|eot_id|>")
	llama3 := hasHeader && hasEOT && (template == "" || strings.Contains(template, "start_header_id"))
	if !llama3 {
		why := "its tokenizer has no <|start_header_id|> and <|eot_id|> tokens"
		if template != "" {
			why = "its chat_template is not the Llama 3 one"
		}
		return "", nil, usagef("--chat: %s is not a Llama 3 instruct checkpoint (%s); use --prompt without --chat", dir, why)
	}
	return fmt.Sprintf(llama3Chat, text), []int32{int32(eot)}, nil
}
