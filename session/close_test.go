package session_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/session"
)

// TestCloseDuringGenerate: a session's Close while a Generate runs in
// another goroutine, resident and offloaded (the offload engine's hooks
// run inside the forwards Close waits for), does not free the weights
// under the forward: Close returns no error (the Generate's KV cache was
// freed with the model), and afterwards Generate, NewPagedCache and
// NewKVCache return decoder.ErrClosed. Before, the forward ran on freed
// weights (on the CPU an error about memory that is not
// host-addressable, on a GPU a use-after-free). "racing" closes as soon as
// the first token is out, mostly meeting a step in progress: the Generate
// returns the start of its tokens and an error wrapping decoder.ErrClosed
// — or, where Close got the model's lock only after the last step (the
// scheduler's choice: a few runs in a hundred under -race), all of them
// and no error. "inOnToken" closes while the Generate sits in its OnToken
// after 3 tokens, and waits there until Close has returned: exactly those
// 3 come back, with decoder.ErrClosed.
func TestCloseDuringGenerate(t *testing.T) {
	for _, c := range []struct {
		name string
		opts session.Options
	}{
		{"resident", session.Options{DeviceMemory: 64 << 20}},
		{"offloaded", session.Options{DeviceMemory: 2 << 20, GPUBudget: "0.5", Manager: "close-during-generate", TransferBlocks: 2}},
	} {
		for _, v := range []struct {
			name string
			at   int
			wait bool
		}{{"racing", 1, false}, {"inOnToken", 3, true}} {
			t.Run(c.name+"/"+v.name, func(t *testing.T) {
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
				var r struct {
					ids []int32
					err error
				}
				r.ids, r.err = testmodel.CloseDuringGenerate(func(o decoder.GenerateOptions) ([]int32, error) { return s.Model.Generate(s.Backend, prompt, o) },
					opt, v.at, v.wait, func() {
						if err := s.Close(); err != nil {
							t.Errorf("Close during Generate: %v", err)
						}
					})
				switch {
				case !v.wait && r.err == nil && slices.Equal(r.ids, want):
					t.Logf("Close got the model after the Generate's last step: all %d tokens, no error", len(r.ids))
				case !errors.Is(r.err, decoder.ErrClosed):
					t.Errorf("Generate during Close: error %v; want decoder.ErrClosed", r.err)
				case len(r.ids) < v.at || len(r.ids) >= len(want) || !slices.Equal(r.ids, want[:len(r.ids)]):
					t.Errorf("Generate during Close returned %v; want at least %d, a start of %v, not all of it", r.ids, v.at, want)
				case v.wait && len(r.ids) != v.at:
					t.Errorf("Generate closed in its OnToken after %d tokens returned %d", v.at, len(r.ids))
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
