package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/flextensor-go/flextensor/loader/gguf"
	"github.com/flextensor-go/flextensor/loader/llama2c"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/spf13/pflag"
)

func init() {
	register(command{name: "convert", summary: "convert a GGUF or llama2.c checkpoint to a Hugging Face directory", run: convertCmd,
		define: func(fs *pflag.FlagSet) { convertFlags(fs) }})
}

const convertUsage = `
infer convert writes a Hugging Face Llama checkpoint directory (config.json,
model.safetensors, generation_config.json and, where the source has a
vocabulary, tokenizer.json) from another format, for the other commands to
run:

  gguf     llama.cpp's GGUF, general.architecture "llama", F32/F16/BF16
           tensors (quantized GGUF types are refused), with its
           sentencepiece vocabulary turned into tokenizer.json;
  llama2c  llama2.c's version-0 .bin (stories15M, stories260K, ...); no
           tokenizer (llama2.c keeps tokenizer.bin apart): prompt with
           --token-ids.

The q and k rows are permuted from the interleaved RoPE pairs both formats
use to the halves Hugging Face Llama rotates.

Usage:
  infer convert --from gguf|llama2c --in FILE --out DIR [--dtype bf16|f32] [--force]

A non-empty --out is refused unless --force, which first removes the
checkpoint there (config, tokenizer, shards).

Examples:
  infer convert --from gguf --in ./testdata/stories260K/stories260K.gguf --out ./stories260K
  infer run-model --model ./stories260K --prompt "Once upon a time" --max-new-tokens 64
`

type convertOptions struct {
	from, in, out, dtype string
	force                bool
}

func convertFlags(fs *pflag.FlagSet) *convertOptions {
	var o convertOptions
	fs.StringVar(&o.from, "from", "", "source format: gguf or llama2c")
	fs.StringVar(&o.in, "in", "", "source checkpoint file")
	fs.StringVar(&o.out, "out", "", "directory to write (created if missing)")
	fs.StringVar(&o.dtype, "dtype", "bf16", "weights written as bf16 or f32")
	fs.BoolVar(&o.force, "force", false, "replace the checkpoint already in --out (its config, tokenizer and shards are removed first)")
	return &o
}

func convertCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("convert", convertUsage, stderr)
	o := convertFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if o.in == "" || o.out == "" {
		return usagef("--in and --out are required")
	}
	var dt runtime.DType
	switch strings.ToLower(o.dtype) {
	case "bf16":
		dt = runtime.BF16
	case "f32":
		dt = runtime.F32
	default:
		return usagef("--dtype %q: want bf16 or f32", o.dtype)
	}
	if o.from != "gguf" && o.from != "llama2c" {
		return usagef("--from %q: want gguf or llama2c", o.from)
	}
	// As make-model: a non-empty --out is refused unless --force.
	if err := checkMakeModelOut(o.out, o.force); err != nil {
		return err
	}
	switch o.from {
	case "gguf":
		s, err := gguf.ConvertLlama(o.in, o.out, gguf.Options{DType: dt})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s: llama, %d layers, hidden %d, %d heads (%d key/value), vocabulary %d, tokenizer.json %v\n",
			o.out, s.Layers, s.Hidden, s.Heads, s.KVHeads, s.Vocab, s.Tokenizer)
	case "llama2c":
		h, err := llama2c.Convert(o.in, o.out, llama2c.Options{DType: dt})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s: llama, %d layers, hidden %d, %d heads (%d key/value), vocabulary %d, no tokenizer\n",
			o.out, h.Layers, h.Dim, h.Heads, h.KVHeads, h.Vocab)
	default:
		return usagef("--from %q: want gguf or llama2c", o.from)
	}
	return nil
}
