package models

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models/decoder"
)

// GenerationConfigFileName is the file of a checkpoint's generation defaults.
const GenerationConfigFileName = "generation_config.json"

// GenerationConfig is what a checkpoint's generation_config.json sets: the
// tokens that end generation and the default sampling.
type GenerationConfig struct {
	EOSTokenIDs []int // "eos_token_id", an int or a list; empty when absent
	BOSTokenID  int   // "bos_token_id"; -1 when absent
	// Sampling is the default sampling: greedy (Temperature 0) unless
	// "do_sample" is true, then "temperature" (default 1), "top_k"
	// (default 50) and "top_p" (default 1), transformers' defaults.
	Sampling kernels.SampleParams
}

// ReadGenerationConfig reads dir/generation_config.json. A checkpoint
// without one gets the greedy default and found false; a malformed one is an
// error naming the field.
func ReadGenerationConfig(dir string) (g GenerationConfig, found bool, err error) {
	g.BOSTokenID = -1
	path := filepath.Join(dir, GenerationConfigFileName)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return g, false, nil
	}
	if err != nil {
		return g, false, fmt.Errorf("generation config: %w", err)
	}
	r, err := loader.ParseFields(data, path)
	if err != nil {
		return g, false, err
	}
	g.EOSTokenIDs = r.Ints("eos_token_id")
	g.BOSTokenID = r.Int("bos_token_id", -1)
	if r.Bool("do_sample", false) {
		g.Sampling = kernels.SampleParams{
			Temperature: float32(r.Float("temperature", 1)),
			TopK:        r.Int("top_k", 50),
			TopP:        float32(r.Float("top_p", 1)),
		}
		s := g.Sampling
		switch {
		case r.Err() != nil:
		case !(s.Temperature >= 0):
			r.Fail(r.Errorf("temperature", "%v is not a temperature", s.Temperature))
		case s.TopK < 0:
			r.Fail(r.Errorf("top_k", "%d is negative", s.TopK))
		case !(s.TopP >= 0 && s.TopP <= 1):
			r.Fail(r.Errorf("top_p", "%v is not in [0, 1]", s.TopP))
		}
	}
	if err := r.Err(); err != nil {
		return g, false, err
	}
	for _, id := range g.EOSTokenIDs {
		if id < 0 {
			return g, false, r.Errorf("eos_token_id", "%d is not a token id", id)
		}
	}
	return g, true, nil
}

// applyGeneration adds the generation config's end-of-sequence tokens to
// the model's (transformers stops at those of generation_config.json; the
// union also keeps config.json's).
func applyGeneration(m *decoder.Model, dir string) error {
	g, found, err := ReadGenerationConfig(dir)
	if err != nil || !found {
		return err
	}
	for _, id := range g.EOSTokenIDs {
		if id >= m.Cfg.VocabSize {
			return fmt.Errorf("generation config %s: eos_token_id %d is not a token id (vocab_size %d)",
				filepath.Join(dir, GenerationConfigFileName), id, m.Cfg.VocabSize)
		}
		if !slices.Contains(m.Cfg.EOSTokenIDs, id) {
			m.Cfg.EOSTokenIDs = append(m.Cfg.EOSTokenIDs, id)
		}
	}
	return nil
}
