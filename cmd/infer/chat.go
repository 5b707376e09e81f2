package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/flextensor-go/flextensor/models/chat"
	"github.com/flextensor-go/flextensor/models/tokenizer"
)

// llama3Template is the Llama 3 instruct chat template, used for a
// checkpoint whose tokenizer_config.json has no chat_template but whose
// tokenizer has the Llama 3 header tokens.
const llama3Template = "{% set loop_messages = messages %}{% for message in loop_messages %}" +
	"{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}" +
	"{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}" +
	"{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"

// chatTemplate returns the chat template of the checkpoint in dir (its
// tokenizer_config.json's chat_template), or the Llama 3 instruct format
// when it has none and tok has the Llama 3 header tokens.
func chatTemplate(dir string, tok *tokenizer.Tokenizer) (*chat.Template, error) {
	path := filepath.Join(dir, "tokenizer_config.json")
	tmpl, err := chat.Load(path)
	if err == nil {
		return tmpl, nil
	}
	if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, chat.ErrNoTemplate) {
		return nil, err
	}
	_, hasHeader := tok.TokenID("<|start_header_id|>")
	_, hasEOT := tok.TokenID("<|eot_id|>")
	bos, hasBOS := "<|begin_of_text|>", false
	if _, ok := tok.TokenID(bos); ok {
		hasBOS = true
	}
	if !hasHeader || !hasEOT || !hasBOS {
		return nil, usagef("%s has no chat_template in tokenizer_config.json and is not a Llama 3 instruct checkpoint (its tokenizer lacks the Llama 3 chat tokens), so there is no chat format to use; give the prompt as plain text", dir)
	}
	eot := "<|eot_id|>"
	return chat.New(llama3Template, &bos, &eot, "the built-in Llama 3 chat format")
}

// renderChat renders messages with the checkpoint's chat template (with the
// generation prompt) and returns the prompt text and the ids of the
// template's end tokens, which stop generation.
func renderChat(dir string, tok *tokenizer.Tokenizer, msgs []chat.Message) (string, []int32, error) {
	tmpl, err := chatTemplate(dir, tok)
	if err != nil {
		return "", nil, err
	}
	text, err := tmpl.Render(msgs, chat.Options{AddGenerationPrompt: true})
	if err != nil {
		return "", nil, err
	}
	var stops []int32
	for _, end := range tmpl.EndTexts() {
		if id, ok := tok.TokenID(end); ok {
			stops = append(stops, int32(id))
		}
	}
	return text, stops, nil
}

// chatPrompt renders a system message (if system is not empty) and the
// user's text with the checkpoint's chat template.
func chatPrompt(dir string, tok *tokenizer.Tokenizer, system, text string) (string, []int32, error) {
	var msgs []chat.Message
	if system != "" {
		msgs = append(msgs, chat.Message{Role: "system", Content: system})
	}
	msgs = append(msgs, chat.Message{Role: "user", Content: text})
	return renderChat(dir, tok, msgs)
}

// readMessages reads an OpenAI-style messages array from a file.
func readMessages(path string) ([]chat.Message, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	msgs, err := chat.ParseMessages(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return msgs, nil
}
