package main

import (
	"fmt"
	"math"

	"github.com/flextensor-go/flextensor/models/decoder"
)

// requestFields names a generation request's fields the way its source
// spells them: run-model's flags, or a --batch-file line's JSON keys. The
// checks below take them so that the flags and every batch line are
// validated by the same code, each error naming the field as the user wrote
// it.
type requestFields struct {
	prompt, tokenIDs, maxNew, temperature, topK, topP, stopTokenIDs string
}

var (
	flagFields = requestFields{prompt: "--prompt", tokenIDs: "--token-ids", maxNew: "--max-new-tokens",
		temperature: "--temperature", topK: "--top-k", topP: "--top-p", stopTokenIDs: "stop tokens"}
	lineFields = requestFields{prompt: "prompt", tokenIDs: "token_ids", maxNew: "max_new_tokens",
		temperature: "temperature", topK: "top_k", topP: "top_p", stopTokenIDs: "stop_token_ids"}
)

// checkPromptSource refuses a request without exactly one non-empty prompt:
// prompt text (nil when not given) or token ids (tokenIDsGiven, with
// tokenIDsEmpty when given as an empty list). Both given is refused first,
// even when one of them is empty, so that neither is silently dropped.
func checkPromptSource(f requestFields, prompt *string, tokenIDsGiven, tokenIDsEmpty bool) error {
	switch {
	case (prompt != nil) == tokenIDsGiven:
		return usagef("give exactly one of %s TEXT or %s 1,2,3", f.prompt, f.tokenIDs)
	case tokenIDsGiven && tokenIDsEmpty:
		return usagef("%s is empty: give token ids, e.g. 1,2,3", f.tokenIDs)
	case prompt != nil && *prompt == "":
		return usagef("%s is empty: give some text (or %s)", f.prompt, f.tokenIDs)
	}
	return nil
}

// checkRequestParams refuses limits and sampling values that would be
// ignored or mean nothing: a negative max new tokens, a temperature that is
// negative, NaN or infinite, a negative top-k, a top-p outside (0, 1] (1
// keeps all tokens; 0, which the sampler also reads as all, is refused so
// that there is one way to say it).
func checkRequestParams(f requestFields, maxNew int, temperature float32, topK int, topP float32) error {
	t := float64(temperature)
	switch {
	case maxNew < 0:
		return usagef("%s %d is negative", f.maxNew, maxNew)
	case math.IsNaN(t) || math.IsInf(t, 0) || t < 0:
		return usagef("%s %g: want a finite number ≥ 0 (0 = greedy)", f.temperature, temperature)
	case topK < 0:
		return usagef("%s %d: want ≥ 0 (0 = all tokens)", f.topK, topK)
	case !(topP > 0 && topP <= 1):
		return usagef("%s %g: want a number in (0, 1]; 1 keeps all tokens", f.topP, topP)
	}
	return nil
}

// checkRequestFits refuses, once the model's config is known, prompt or stop
// token ids outside its vocabulary and a prompt that with maxNew new tokens
// exceeds its context. fromText says the prompt came from text (f.prompt)
// rather than ids (f.tokenIDs).
func checkRequestFits(f requestFields, cfg decoder.Config, prompt []int32, fromText bool, maxNew int, stops []int32) error {
	what := f.tokenIDs
	if fromText {
		what = f.prompt
	}
	for i, id := range prompt {
		if id < 0 || int(id) >= cfg.VocabSize {
			return usagef("%s: id %d at position %d is outside the vocabulary [0, %d)", what, id, i, cfg.VocabSize)
		}
	}
	for i, id := range stops {
		if id < 0 || int(id) >= cfg.VocabSize {
			return usagef("%s: id %d at position %d is outside the vocabulary [0, %d)", f.stopTokenIDs, id, i, cfg.VocabSize)
		}
	}
	if n, ctxLen := len(prompt)+maxNew, cfg.MaxPositionEmbeddings; n > ctxLen {
		verb := what + " gives"
		if fromText {
			verb = what + " is"
		}
		hint := fmt.Sprintf("lower %s to %d", f.maxNew, ctxLen-len(prompt))
		if len(prompt) >= ctxLen {
			hint = "shorten the prompt"
		}
		return usagef("%s %d tokens and %s %d: %d positions exceed the model's context of %d (max_position_embeddings in config.json); %s",
			verb, len(prompt), f.maxNew, maxNew, n, ctxLen, hint)
	}
	return nil
}
