package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/flextensor-go/flextensor/models"
	_ "github.com/flextensor-go/flextensor/models/all" // every family's shapes (and configs) registered
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/spf13/pflag"
)

func init() {
	register(command{name: "make-model", summary: "write a random-weight checkpoint of a named shape (Llama, Qwen2, Qwen3, Mistral)", run: makeModel,
		define: func(fs *pflag.FlagSet) { makeModelFlags(fs) }})
}

const makeModelUsage = `
infer make-model writes a Hugging Face checkpoint (config.json, sharded BF16
safetensors and model.safetensors.index.json) with random weights, for
benchmarks that go through the real loading path. Each family names its
shapes: real sizes (llama3-8b, qwen3-8b, qwen2.5-7b, mistral-7b, ...) and
tiny ones for tests (qwen3-tiny, ...).

With --dtype fp8-channel or fp8-block the Linear weights (not lm_head) are
FP8 (E4M3) as the Hub publishes them: compressed-tensors float-quantized
with per-channel weight_scale, or quant_method fp8 with weight_scale_inv per
128×128 block; config.json carries the quantization_config.

Usage:
  infer make-model --shape NAME --out DIR [--layers N] [--seed S] [--dtype bf16|fp8-channel|fp8-block]

Examples:
  infer make-model --shape llama3-8b --out /tmp/llama3-8b
  infer make-model --shape llama3-8b --layers 4 --out /tmp/llama3-8b-4l
  infer make-model --shape qwen3-8b --out /tmp/qwen3-8b
  infer make-model --shape llama3-8b --dtype fp8-block --out /tmp/llama3-8b-fp8
`

type makeModelOptions struct {
	shape, out string
	dtype      string
	layers     int
	seed       uint64
	shard      int64
}

func makeModelFlags(fs *pflag.FlagSet) *makeModelOptions {
	var o makeModelOptions
	fs.StringVar(&o.shape, "shape", "", "model shape: "+strings.Join(models.ShapeNames(), ", "))
	fs.StringVar(&o.out, "out", "", "output directory (created)")
	fs.IntVar(&o.layers, "layers", 0, "override the number of layers (0 = the shape's)")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed")
	fs.Int64Var(&o.shard, "shard-bytes", 5<<30, "largest shard, in bytes")
	fs.StringVar(&o.dtype, "dtype", decoder.FormatBF16, "weight format: "+strings.Join(decoder.Formats, ", "))
	return &o
}

func makeModel(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("make-model", makeModelUsage, stderr)
	o := makeModelFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	shape, out, layers, seed, shard := &o.shape, &o.out, &o.layers, &o.seed, &o.shard
	if _, _, err := models.FindShape(*shape); err != nil {
		return usagef("--shape %q: unknown (known: %s)", *shape, strings.Join(models.ShapeNames(), ", "))
	}
	if *out == "" {
		return usagef("--out is required")
	}
	if *layers < 0 {
		return usagef("--layers %d is negative", *layers)
	}
	if _, err := decoder.QuantizationConfig(o.dtype); err != nil {
		return usagef("--dtype %q: unknown (known: %s)", o.dtype, strings.Join(decoder.Formats, ", "))
	}
	start := time.Now()
	if err := models.MakeCheckpointFormat(*out, *shape, o.dtype, *layers, *seed, *shard); err != nil {
		return err
	}
	m, err := models.New(*out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (%s, %d layers, %s) in %v\n", *out, *shape, len(m.Layers), o.dtype, time.Since(start).Round(time.Millisecond))
	return nil
}
