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
	cleanup = func() { os.RemoveAll(dir) }
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
