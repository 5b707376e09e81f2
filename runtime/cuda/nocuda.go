//go:build !cuda

package cuda

import (
	"errors"
	"fmt"
)

// ErrNotBuilt is returned by Open in builds without the cuda tag.
var ErrNotBuilt = errors.New("built without CUDA (rebuild with -tags cuda: make build-cuda)")

// Device is a GPU; in builds without the cuda tag there is none to open.
type Device struct{}

// Open fails: this binary was built without the cuda tag.
func Open(index int) (*Device, error) { return OpenWith(index, Options{}) }

// OpenWith fails: this binary was built without the cuda tag.
func OpenWith(index int, _ Options) (*Device, error) {
	return nil, fmt.Errorf("cuda:%d: %w", index, ErrNotBuilt)
}
