package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/flextensor-go/flextensor/models"
	_ "github.com/flextensor-go/flextensor/models/all" // every family's shapes (and configs) registered
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/spf13/pflag"
)

func init() {
	register(command{name: "make-model", summary: "write a random-weight checkpoint of a named shape (Llama, Qwen2, Qwen3, Mistral)", run: makeModel,
		define: func(fs *pflag.FlagSet) { makeModelFlags(fs) }})
}

const makeModelUsage = `
infer make-model writes a Hugging Face checkpoint (config.json, sharded BF16
safetensors and model.safetensors.index.json) with random weights, for
benchmarks that go through the real loading path, and a byte-level
tokenizer.json covering the whole vocabulary (so --prompt works; the text is
gibberish). Each family names its shapes: real sizes (llama3-8b 16.06 GB,
qwen3-8b, qwen2.5-7b, mistral-7b, llama3-1b 2.47 GB, ...) and tiny ones for
tests (qwen3-tiny, deep-test, ...: no tokenizer when the vocabulary is too
small, use --token-ids); --layers N makes a smaller one.

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
	force      bool
}

func makeModelFlags(fs *pflag.FlagSet) *makeModelOptions {
	var o makeModelOptions
	fs.StringVar(&o.shape, "shape", "", "model shape: "+strings.Join(models.ShapeNames(), ", "))
	fs.StringVar(&o.out, "out", "", "output directory (created)")
	fs.IntVar(&o.layers, "layers", 0, "override the number of layers (0 = the shape's)")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed")
	fs.Int64Var(&o.shard, "shard-bytes", 5<<30, "largest shard, in bytes")
	fs.BoolVar(&o.force, "force", false, "replace the checkpoint already in --out (its config, tokenizer and shards are removed first)")
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
	if *shard <= 0 {
		return usagef("--shard-bytes %d: want a positive number of bytes", *shard)
	}
	if err := checkMakeModelOut(*out, o.force); err != nil {
		return err
	}
	fam, cfgJSON, err := models.ShapeConfig(*shape, *layers)
	if err != nil {
		return err
	}
	m, err := fam.New(cfgJSON, *shape) // no weights: sizes only
	if err != nil {
		return err
	}
	cfg := m.Cfg
	params, size := shapeSize(m)
	count := fmt.Sprintf("%.2f B", float64(params)/1e9)
	if params < 1e9 {
		count = fmt.Sprintf("%.2f M", float64(params)/1e6)
	}
	fmt.Fprintf(stderr, "make-model: writing %s (%d layers, %s parameters, %s in BF16; --dtype %s) to %s\n",
		*shape, cfg.NumHiddenLayers, count, runtime.FormatBytes(size), o.dtype, *out)
	start := time.Now()
	if err := models.MakeCheckpointFormat(*out, *shape, o.dtype, *layers, *seed, *shard); err != nil {
		return err
	}
	tok := "a byte-level tokenizer.json"
	if ok, err := byteLevelTokenizer(*out, cfg.VocabSize, cfg.BOSTokenID, cfg.EOSTokenIDs); err != nil {
		return err
	} else if !ok {
		tok = "no tokenizer (the vocabulary is too small for a byte-level one: use --token-ids)"
	}
	fmt.Fprintf(stdout, "wrote %s (%s, %s, %d layers, %s, %s) in %v\n", *out, *shape, o.dtype, cfg.NumHiddenLayers, runtime.FormatBytes(size), tok, time.Since(start).Round(time.Millisecond))
	return nil
}
