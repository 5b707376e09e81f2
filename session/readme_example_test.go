package session_test

// This file is the README's "As a library" snippet, from the import line on;
// TestREADMESnippet keeps the two equal and runs generate on the CPU.

import (
	"errors"

	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/session"
)

// generate continues prompt with the checkpoint in dir ("" = the bundled tiny
// model) on device ("cuda:0", "cpu"), keeping at most 8 GiB of weights on the
// device (the rest streams from pinned host memory), and saves the offload
// profile in profile for the next process (session.Options{ProfileDir: profile}).
func generate(dir, device, profile string, prompt []int32) (_ []int32, err error) {
	s, err := session.Open(dir, device, session.Options{GPUBudget: "8GiB"})
	if err != nil {
		return nil, err // without -tags cuda, "cuda:0" fails here: built without CUDA
	}
	// Close releases the manager, the model, the checkpoint and the device;
	// it reports device memory still held (KV caches made on s.Model are
	// the caller's to free first).
	defer func() { err = errors.Join(err, s.Close()) }()
	ids, err := s.Model.Generate(s.Backend, prompt, decoder.GenerateOptions{MaxNewTokens: 32, IgnoreEOS: true})
	if err != nil {
		return nil, err
	}
	return ids, offload.SaveProfile(profile, s.Manager)
}
