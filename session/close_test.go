package session_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/session"
)

// TestCloseDuringGenerate: a session's Close while a Generate runs in
// another goroutine, resident and offloaded (the offload engine's hooks
// run inside the forwards Close waits for), does not free the weights
// under the forward: the Generate returns the start of its tokens alone
// and an error wrapping decoder.ErrClosed, Close returns no error (the
// Generate's KV cache was freed with the model), and afterwards
// Generate, Forward and NewPagedCache return decoder.ErrClosed. Before,
// the forward ran on freed weights (on the CPU an error about memory that
// is not host-addressable, on a GPU a use-after-free).
func TestCloseDuringGenerate(t *testing.T) {
	for _, c := range []struct {
		name string
		opts session.Options
	}{
		{"resident", session.Options{DeviceMemory: 64 << 20}},
		{"offloaded", session.Options{DeviceMemory: 2 << 20, GPUBudget: "0.5", Manager: "close-during-generate", TransferBlocks: 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := session.Open("", "cpu", c.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			prompt := []int32{3, 1, 4, 1, 5}
			opt := decoder.GenerateOptions{MaxNewTokens: 60, IgnoreEOS: true}
			want, err := s.Model.Generate(s.Backend, prompt, opt)
			if err != nil {
				t.Fatal(err)
			}
			first := make(chan struct{})
			n := 0
			opt.OnToken = func(int32) error {
				if n++; n == 1 {
					close(first)
				}
				return nil
			}
			type result struct {
				ids []int32
				err error
			}
			done := make(chan result, 1)
			go func() {
				ids, err := s.Model.Generate(s.Backend, prompt, opt)
				done <- result{ids, err}
			}()
			<-first
			if err := s.Close(); err != nil {
				t.Errorf("Close during Generate: %v", err)
			}
			r := <-done
			if !errors.Is(r.err, decoder.ErrClosed) {
				t.Errorf("Generate during Close: error %v; want decoder.ErrClosed", r.err)
			}
			if len(r.ids) == 0 || len(r.ids) >= len(want) || !slices.Equal(r.ids, want[:len(r.ids)]) {
				t.Errorf("Generate during Close returned %v; want a start of %v, not all of it", r.ids, want)
			}
			if _, err := s.Model.Generate(s.Backend, prompt, opt); !errors.Is(err, decoder.ErrClosed) {
				t.Errorf("Generate after Close: %v; want decoder.ErrClosed", err)
			}
			if _, err := s.Model.NewPagedCache(s.Backend, 4, 0); !errors.Is(err, decoder.ErrClosed) {
				t.Errorf("NewPagedCache after Close: %v; want decoder.ErrClosed", err)
			}
			if _, err := s.Model.NewKVCache(s.Backend, 4); !errors.Is(err, decoder.ErrClosed) {
				t.Errorf("NewKVCache after Close: %v; want decoder.ErrClosed", err)
			}
		})
	}
}

// TestCloseWithCacheHeld: a KV cache made on the session's model and not
// closed before the session makes Close return an error naming the device
// memory still held (what the docs of Close and NewPagedCache warn of);
// closed first, Close returns nil.
func TestCloseWithCacheHeld(t *testing.T) {
	for _, closeFirst := range []bool{false, true} {
		s, err := session.Open("", "cpu", session.Options{DeviceMemory: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		paged, err := s.Model.NewPagedCache(s.Backend, 8, 0)
		if err != nil {
			t.Fatal(err)
		}
		if closeFirst {
			paged.Close()
		}
		err = s.Close()
		switch {
		case closeFirst && err != nil:
			t.Errorf("Close after the cache's Close: %v", err)
		case !closeFirst && (err == nil || !strings.Contains(err.Error(), "still held")):
			t.Errorf("Close with a paged cache held: %v; want an error naming the memory still held", err)
		}
		if !closeFirst {
			paged.Close() // late, on the closed device: must not panic
		}
	}
}
