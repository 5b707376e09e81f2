package main

import (
	"encoding/json"
	"fmt"
	"github.com/flextensor-go/flextensor/loader/hub"
	"io"
	"os"
	"path/filepath"
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
Llama 2 and Mistral, with Qwen's NFC normalizer). Special tokens (BOS) are
added only with --add-special.

With --messages FILE (an OpenAI-style JSON array of {"role", "content"}
messages) it renders the conversation with the checkpoint's chat template
(tokenizer_config.json beside tokenizer.json; the Llama 3 format when it has
none) with the generation prompt, as transformers' apply_chat_template does,
and tokenizes the result without adding special tokens. --json then prints
{"text": <rendered prompt>, "ids": [...]}.

Usage:
  infer tokenize (--tokenizer FILE | --model DIR) (--text TEXT [--add-special] | --messages FILE) [--json]

Examples:
  infer tokenize --model ./Llama-3.1-8B --text "Hello, world!" --json
  infer tokenize --tokenizer ./tokenizer.json --text "naïve café" --add-special
  infer tokenize --model ./Qwen3-8B --messages chat.json --json
`

type tokenizeOptions struct {
	tokenizer, model, text, messages string
	addSpecial, jsonOut              bool
}

func tokenizeFlags(fs *pflag.FlagSet) *tokenizeOptions {
	var o tokenizeOptions
	fs.StringVar(&o.tokenizer, "tokenizer", "", "tokenizer.json file")
	fs.StringVar(&o.model, "model", "", "checkpoint directory holding tokenizer.json, or ORG/NAME[@REV] in the Hugging Face cache (instead of --tokenizer); default: the bundled model's")
	fs.StringVar(&o.text, "text", "", "text to tokenize")
	fs.StringVar(&o.messages, "messages", "", "JSON file with an OpenAI-style messages array to render with the chat template and tokenize (instead of --text)")
	fs.BoolVar(&o.addSpecial, "add-special", false, "add the post-processor's special tokens (BOS)")
	fs.BoolVar(&o.jsonOut, "json", false, `print {"ids": [...]} ({"text": ..., "ids": [...]} with --messages)`)
	return &o
}

func tokenizeCmd(args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("tokenize", tokenizeUsage, stderr)
	o := tokenizeFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if o.tokenizer != "" && o.model != "" {
		return usagef("give --tokenizer or --model, not both")
	}
	if fs.Changed("text") == (o.messages != "") {
		return usagef("give --text TEXT (it may be empty: --text '') or --messages FILE")
	}
	if o.messages != "" && o.addSpecial {
		return usagef("--add-special does not apply to --messages (the chat template writes the special tokens)")
	}
	path := o.tokenizer
	if path == "" && o.model != "" {
		dir, err := hub.Resolve(o.model) // a directory, or ORG/NAME[@REV] in the Hugging Face cache
		if err != nil {
			return err
		}
		path = dir
	}
	if path == "" {
		dir, cleanup, xerr := flextensor.ExtractTinyLlama()
		if xerr != nil {
			return xerr
		}
		defer cleanup()
		// Errors name the bundled model, not its temporary directory.
		defer func() { err = bundledError(err, dir) }()
		path = dir
	}
	tok, err := loadTokenizer(path)
	if err != nil {
		return err
	}
	text, addSpecial := o.text, o.addSpecial
	if o.messages != "" {
		msgs, err := readMessages(o.messages)
		if err != nil {
			return err
		}
		dir := path
		if st, err := os.Stat(path); err == nil && !st.IsDir() {
			dir = filepath.Dir(path)
		}
		if text, _, err = renderChat(dir, tok, msgs); err != nil {
			return err
		}
	}
	ids, err := tok.Encode(text, addSpecial)
	if err != nil {
		return err
	}
	if ids == nil {
		ids = []int{}
	}
	if o.jsonOut {
		if o.messages != "" {
			enc := json.NewEncoder(stdout)
			enc.SetEscapeHTML(false)
			return enc.Encode(struct {
				Text string `json:"text"`
				IDs  []int  `json:"ids"`
			}{text, ids})
		}
		return json.NewEncoder(stdout).Encode(map[string]any{"ids": ids})
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(id)
	}
	fmt.Fprintln(stdout, strings.Join(parts, ","))
	return nil
}
