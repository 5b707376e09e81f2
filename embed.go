// Package flextensor is FlexTensor for Go: a Go inference runtime with its own
// transformer executor that runs models larger than GPU memory by streaming
// weights from pinned host memory. This root package only carries the tiny
// bundled model; the runtime lives in the subpackages (runtime, kernels, nn,
// loader, offload, models/llama) and the CLI in cmd/infer.
package flextensor

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

//go:embed testdata/tiny-llama/config.json testdata/tiny-llama/model.safetensors testdata/tiny-llama/tokenizer.json testdata/tiny-llama/generation_config.json
var tiny embed.FS

// TinyLlama is the bundled tiny Llama checkpoint (4 layers, hidden 128,
// vocabulary 512): config.json, model.safetensors, tokenizer.json.
func TinyLlama() fs.FS {
	sub, err := fs.Sub(tiny, "testdata/tiny-llama")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return sub
}

// ExtractTinyLlama writes the bundled checkpoint into a new temporary
// directory and returns it with a function that removes it.
func ExtractTinyLlama() (dir string, cleanup func(), err error) {
	dir, err = os.MkdirTemp("", "flextensor-tiny-llama-")
	if err != nil {
		return "", nil, fmt.Errorf("extracting the bundled model: %w", err)
	}
	extracted.Lock()
	extracted.dirs[dir] = true
	extracted.Unlock()
	cleanup = func() {
		os.RemoveAll(dir)
		extracted.Lock()
		delete(extracted.dirs, dir)
		extracted.Unlock()
	}
	err = fs.WalkDir(TinyLlama(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(TinyLlama(), p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, p), data, 0o644)
	})
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("extracting the bundled model: %w", err)
	}
	return dir, cleanup, nil
}

// extracted are the directories ExtractTinyLlama made that are not removed
// yet.
var extracted = struct {
	sync.Mutex
	dirs map[string]bool
}{dirs: map[string]bool{}}

// RemoveExtracted removes every directory ExtractTinyLlama made in this
// process whose cleanup has not run: for a process about to exit at once
// (a second Ctrl-C) without unwinding.
func RemoveExtracted() {
	extracted.Lock()
	defer extracted.Unlock()
	for dir := range extracted.dirs {
		os.RemoveAll(dir)
		delete(extracted.dirs, dir)
	}
}

// IsExtracted reports whether dir is a directory ExtractTinyLlama made (so
// that messages can name it as the bundled model rather than a temporary
// path).
func IsExtracted(dir string) bool {
	extracted.Lock()
	defer extracted.Unlock()
	return extracted.dirs[dir]
}
