package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

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
