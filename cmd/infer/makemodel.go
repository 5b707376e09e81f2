package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/flextensor-go/flextensor/models/llama"
	"github.com/spf13/pflag"
)

func init() {
	register(command{name: "make-model", summary: "write a random-weight Llama checkpoint of a named shape", run: makeModel,
		define: func(fs *pflag.FlagSet) { makeModelFlags(fs) }})
}

const makeModelUsage = `
infer make-model writes a Hugging Face Llama checkpoint (config.json, sharded
BF16 safetensors and model.safetensors.index.json) with random weights, for
benchmarks that go through the real loading path.

Usage:
  infer make-model --shape NAME --out DIR [--layers N] [--seed S]

Examples:
  infer make-model --shape llama3-8b --out /tmp/llama3-8b
  infer make-model --shape llama3-8b --layers 4 --out /tmp/llama3-8b-4l
`

type makeModelOptions struct {
	shape, out string
	layers     int
	seed       uint64
	shard      int64
}

func makeModelFlags(fs *pflag.FlagSet) *makeModelOptions {
	var o makeModelOptions
	fs.StringVar(&o.shape, "shape", "", "model shape: "+strings.Join(llama.ShapeNames(), ", "))
	fs.StringVar(&o.out, "out", "", "output directory (created)")
	fs.IntVar(&o.layers, "layers", 0, "override the number of layers (0 = the shape's)")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed")
	fs.Int64Var(&o.shard, "shard-bytes", 5<<30, "largest shard, in bytes")
	return &o
}

func makeModel(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("make-model", makeModelUsage, stderr)
	o := makeModelFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	shape, out, layers, seed, shard := &o.shape, &o.out, &o.layers, &o.seed, &o.shard
	cfg, ok := llama.Shapes[*shape]
	if !ok {
		return usagef("--shape %q: unknown (known: %s)", *shape, strings.Join(llama.ShapeNames(), ", "))
	}
	if *out == "" {
		return usagef("--out is required")
	}
	if *layers < 0 {
		return usagef("--layers %d is negative", *layers)
	}
	if *layers > 0 {
		cfg.NumHiddenLayers = *layers
	}
	start := time.Now()
	if err := llama.MakeCheckpoint(*out, cfg, *seed, *shard); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (%s, %d layers) in %v\n", *out, *shape, cfg.NumHiddenLayers, time.Since(start).Round(time.Millisecond))
	return nil
}
