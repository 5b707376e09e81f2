//go:build cuda

package llama

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/flextensor-go/flextensor/models/decoder"
)

// TestConcurrentGenerateCUDA: on the GPU with replayed decode graphs,
// 4 goroutines × 2 Generate calls on one model (prompts of 3 to 19
// tokens, so a long prefill replaces the workspace between a short
// call's graph steps and that call captures again) each give the tokens
// of the same call alone; then a Close while a Generate runs returns its
// tokens so far with ErrClosed, and the device's leak check at cleanup
// shows the Generate's cache and graph were freed.
func TestConcurrentGenerateCUDA(t *testing.T) {
	ref, rb := loadTinyCUDA(t, tinyDir)
	m, b := loadTinyCUDA(t, tinyDir)
	prompts := [][]int32{{1, 2, 3}, {5, 17, 42, 9, 33, 61, 7, 8, 100, 2, 3, 4, 90, 91, 92, 93, 11, 12, 13}, {7, 7, 8, 9}, {40, 41, 42, 43, 44, 45, 46, 47}}
	opt := GenerateOptions{MaxNewTokens: 24, IgnoreEOS: true}
	want := make([][]int32, len(prompts))
	for i, p := range prompts {
		got, err := ref.Generate(rb, p, opt)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = got
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range 2 {
				i := (g + c) % len(prompts)
				got, err := m.Generate(b, prompts[i], opt)
				if err != nil || !slices.Equal(got, want[i]) {
					errs <- fmt.Errorf("goroutine %d call %d (prompt %d): %v, %v; alone %v", g, c, i, got, err, want[i])
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	first := make(chan struct{})
	n := 0
	long := opt
	long.MaxNewTokens = 200
	long.OnToken = func(int32) error {
		if n++; n == 1 {
			close(first)
		}
		return nil
	}
	done := make(chan error, 1)
	var got []int32
	go func() {
		var err error
		got, err = m.Generate(b, prompts[0], long)
		done <- err
	}()
	<-first
	m.Close()
	if err := <-done; !errors.Is(err, decoder.ErrClosed) || len(got) == 0 || len(got) >= 200 {
		t.Errorf("Generate during Close: %d tokens, %v; want some tokens and decoder.ErrClosed", len(got), err)
	}
}
