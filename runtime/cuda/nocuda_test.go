//go:build !cuda

package cuda

import (
	"errors"
	"strings"
	"testing"
)

func TestOpenWithoutCUDA(t *testing.T) {
	d, err := Open(0)
	if d != nil || !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("Open = %v, %v; want ErrNotBuilt", d, err)
	}
	for _, want := range []string{"cuda:0", "built without CUDA", "make build-cuda"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}
