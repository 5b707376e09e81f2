// Package testmodel holds what tests of whole models share: writing and
// loading a checkpoint with a cleanup that closes it, one forward pass's
// logits, and a prefill followed by one-token decode steps. The package is for tests
// only (other packages' _test files import it).
package testmodel

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/runtime"
)

// LoadFunc loads the checkpoint in dir on dev: llama.Load, models.Load.
type LoadFunc func(dir string, dev runtime.Device) (*decoder.Model, *loader.Checkpoint, error)

// Load loads the checkpoint in dir on dev with load, failing t on an error;
// a cleanup closes the model and the checkpoint (before the cleanups
// registered earlier, such as the one closing dev).
func Load(t testing.TB, load LoadFunc, dir string, dev runtime.Device) *decoder.Model {
	t.Helper()
	m, ck, err := load(dir, dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		ck.Close()
	})
	return m
}

// ReadLogits copies the logits tensor lt, which b computed, to a slice.
func ReadLogits(b kernels.Backend, lt *runtime.Tensor) ([]float32, error) {
	v := make([]float32, lt.NumElements())
	if err := b.ReadF32(v, lt); err != nil {
		return nil, err
	}
	return v, nil
}

// Forward runs ids through m over a fresh KV cache of len(ids) positions
// and returns the logits: every position's (all) or the last one's. It
// fails t on an error.
func Forward(t testing.TB, m *decoder.Model, b kernels.Backend, ids []int32, all bool) []float32 {
	t.Helper()
	cache, err := m.NewKVCache(b, len(ids))
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Free()
	lt, err := m.Forward(b, cache, ids, all)
	if err != nil {
		t.Fatal(err)
	}
	v, err := ReadLogits(b, lt)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Steps runs a prefill of prompt over cache, then steps one-token forwards,
// each token chosen by next from the step number (0 for the first decode
// step) and the previous forward's logits. It returns every forward's
// last-position logits, steps+1 rows. It needs no testing.T, so goroutines
// may call it.
func Steps(m *decoder.Model, b kernels.Backend, cache decoder.Cache, prompt []int32, steps int, next func(step int, logits []float32) int32) ([][]float32, error) {
	var out [][]float32
	ids := prompt
	for s := 0; s <= steps; s++ {
		lt, err := m.Forward(b, cache, ids, false)
		if err != nil {
			return nil, fmt.Errorf("forward %d: %w", s, err)
		}
		v, err := ReadLogits(b, lt)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		if s < steps {
			ids = []int32{next(s, v)}
		}
	}
	return out, nil
}

// Argmax is the greedy choice for Steps: the token of the largest logit.
func Argmax(_ int, logits []float32) int32 { return int32(kernels.Argmax(logits)) }

// Greedy is Steps with greedy decoding over a fresh KV cache of
// len(prompt)+steps positions.
func Greedy(m *decoder.Model, b kernels.Backend, prompt []int32, steps int) ([][]float32, error) {
	cache, err := m.NewKVCache(b, len(prompt)+steps)
	if err != nil {
		return nil, err
	}
	defer cache.Free()
	return Steps(m, b, cache, prompt, steps, Argmax)
}

// Run is Greedy that fails t on an error.
func Run(t testing.TB, m *decoder.Model, b kernels.Backend, prompt []int32, steps int) [][]float32 {
	t.Helper()
	out, err := Greedy(m, b, prompt, steps)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// WriteCheckpoint writes ts as a single-file safetensors checkpoint in a
// fresh temporary directory and opens it, failing t on an error; a cleanup
// closes it.
func WriteCheckpoint(t testing.TB, ts []loader.NamedTensor) *loader.Checkpoint {
	t.Helper()
	dir := t.TempDir()
	if err := loader.WriteFile(filepath.Join(dir, loader.SingleFileName), ts, nil); err != nil {
		t.Fatal(err)
	}
	ck, err := loader.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return ck
}

// Reference is a fixture checkpoint's reference.json, what transformers
// computed for it: float32 logits (from the bf16 weights) of every position
// of two prompts, a greedy continuation, and (family fixtures) the last
// logits of a long prompt.
type Reference struct {
	InputIDs           [][]int32     `json:"input_ids"`
	Logits             [][][]float32 `json:"logits_fp32_from_bf16_weights"`
	GreedyPrompt       []int32       `json:"greedy_prompt"`
	GreedyContinuation []int32       `json:"greedy_continuation"`
	LongPrompt         []int32       `json:"long_prompt"`
	LongLastLogits     []float32     `json:"long_last_logits"`
}

// CloseDuringGenerate runs generate(opt) in another goroutine with an
// OnToken that, at the at-th token, lets this goroutine call closeFn and,
// with wait, holds the Generate in that OnToken until closeFn has
// returned; it returns what the Generate returned. (opt's own OnToken is
// replaced.)
func CloseDuringGenerate(generate func(decoder.GenerateOptions) ([]int32, error), opt decoder.GenerateOptions, at int, wait bool, closeFn func()) ([]int32, error) {
	reached, closed := make(chan struct{}), make(chan struct{})
	n := 0
	opt.OnToken = func(int32) error {
		if n++; n == at {
			close(reached)
			if wait {
				<-closed
			}
		}
		return nil
	}
	type result struct {
		ids []int32
		err error
	}
	done := make(chan result, 1)
	go func() {
		ids, err := generate(opt)
		done <- result{ids, err}
	}()
	<-reached
	closeFn()
	close(closed)
	r := <-done
	return r.ids, r.err
}
