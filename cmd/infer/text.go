package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models/tokenizer"
)

// loadTokenizer reads tokenizer.json from path (a file) or from a model
// directory.
func loadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "tokenizer.json")
	}
	// A named pipe in place of tokenizer.json would block the read forever.
	if f, err := loader.OpenRegular(path); err == nil {
		f.Close()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	tok, err := tokenizer.Load(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no tokenizer at %s (text prompts need the checkpoint's tokenizer.json; --token-ids works without one)", path)
	}
	return tok, err
}

// decodeLenient decodes ids as text; ids the tokenizer cannot decode (a
// random-weight model may choose ids its tokenizer does not cover) become
// U+FFFD, and the runs between them decode as usual.
func decodeLenient(tok *tokenizer.Tokenizer, ids []int) string {
	if text, err := tok.Decode(ids, true); err == nil {
		return text
	}
	var b strings.Builder
	run := []int{}
	flush := func() {
		if len(run) > 0 {
			text, _ := tok.Decode(run, true)
			b.WriteString(text)
			run = run[:0]
		}
	}
	for _, id := range ids {
		if _, err := tok.Decode([]int{id}, true); err != nil {
			flush()
			b.WriteRune('\uFFFD')
			continue
		}
		run = append(run, id)
	}
	flush()
	return b.String()
}
