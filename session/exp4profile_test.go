package session_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/session"
)

// TestProfileStreamCodec: a profile saved from a session with StreamExp4
// records it, and a session opened from it (ProfileDir, StreamExp4 left
// off) streams packed again and gives the resident tokens; asking for
// exp4 streaming with a profile made without it is refused with
// ErrBadOptions naming the profile.
func TestProfileStreamCodec(t *testing.T) {
	dir := "../testdata/tiny-llama"
	prompt := []int32{1, 5, 9, 3}
	opt := decoder.GenerateOptions{MaxNewTokens: 6, IgnoreEOS: true}
	want := residentTokens(t, dir, prompt, opt)
	profile := func(exp4 bool) string {
		s, err := session.Open(dir, "cpu", session.Options{GPUBudget: "0", StreamExp4: exp4})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := s.Model.Generate(s.Backend, prompt, opt); err != nil {
			t.Fatal(err)
		}
		pdir := t.TempDir()
		if err := offload.SaveProfile(pdir, s.Manager); err != nil {
			t.Fatal(err)
		}
		return pdir
	}
	packed, plain := profile(true), profile(false)

	s, err := session.Open(dir, "cpu", session.Options{ProfileDir: packed})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Model.Generate(s.Backend, prompt, opt)
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("from the exp4 profile: %v, %v; want the resident tokens %v", got, err, want)
	}
	last := offload.GetOffloadManager(s.Manager).LastPass()
	if last.Streamed == 0 || last.Packed != last.Streamed {
		t.Errorf("from the exp4 profile: %v; want every streamed layer packed", last)
	}
	s.Close()

	_, err = session.Open(dir, "cpu", session.Options{ProfileDir: plain, StreamExp4: true})
	if !errors.Is(err, session.ErrBadOptions) || !strings.Contains(err.Error(), plain) || !strings.Contains(err.Error(), "exp4") {
		t.Errorf("exp4 streaming with a profile made without it: %v; want ErrBadOptions naming the profile", err)
	}
}

// residentTokens is what a resident CPU session of the checkpoint in dir
// generates from prompt.
func residentTokens(t *testing.T, dir string, prompt []int32, opt decoder.GenerateOptions) []int32 {
	t.Helper()
	res, err := session.Open(dir, "cpu", session.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	want, err := res.Model.Generate(res.Backend, prompt, opt)
	if err != nil {
		t.Fatal(err)
	}
	return want
}
