package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	flextensor "github.com/flextensor-go/flextensor"
	"github.com/spf13/pflag"
)

func init() {
	register(command{name: "tokenize", summary: "turn text into token ids with a tokenizer.json", run: tokenizeCmd,
		define: func(fs *pflag.FlagSet) { tokenizeFlags(fs) }})
}

const tokenizeUsage = `
infer tokenize prints the token ids of a text under a Hugging Face
tokenizer.json (byte-level BPE as in Llama 3, or SentencePiece-style BPE as in
Llama 2 and Mistral). Special tokens (BOS) are added only with --add-special.

Usage:
  infer tokenize (--tokenizer FILE | --model DIR) --text TEXT [--add-special] [--json]

Examples:
  infer tokenize --model ./Llama-3.1-8B --text "Hello, world!" --json
  infer tokenize --tokenizer ./tokenizer.json --text "naïve café" --add-special
`

type tokenizeOptions struct {
	tokenizer, model, text string
	addSpecial, jsonOut    bool
}

func tokenizeFlags(fs *pflag.FlagSet) *tokenizeOptions {
	var o tokenizeOptions
	fs.StringVar(&o.tokenizer, "tokenizer", "", "tokenizer.json file")
	fs.StringVar(&o.model, "model", "", "checkpoint directory holding tokenizer.json (instead of --tokenizer); default: the bundled model's")
	fs.StringVar(&o.text, "text", "", "text to tokenize")
	fs.BoolVar(&o.addSpecial, "add-special", false, "add the post-processor's special tokens (BOS)")
	fs.BoolVar(&o.jsonOut, "json", false, `print {"ids": [...]}`)
	return &o
}

func tokenizeCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("tokenize", tokenizeUsage, stderr)
	o := tokenizeFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if o.tokenizer != "" && o.model != "" {
		return usagef("give --tokenizer or --model, not both")
	}
	if !fs.Changed("text") {
		return usagef("--text is required (it may be empty: --text '')")
	}
	path := o.tokenizer
	if path == "" {
		path = o.model
	}
	if path == "" {
		dir, cleanup, err := flextensor.ExtractTinyLlama()
		if err != nil {
			return err
		}
		defer cleanup()
		path = dir
	}
	tok, err := loadTokenizer(path)
	if err != nil {
		return err
	}
	ids, err := tok.Encode(o.text, o.addSpecial)
	if err != nil {
		return err
	}
	if ids == nil {
		ids = []int{}
	}
	if o.jsonOut {
		return json.NewEncoder(stdout).Encode(map[string]any{"ids": ids})
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(id)
	}
	fmt.Fprintln(stdout, strings.Join(parts, ","))
	return nil
}
