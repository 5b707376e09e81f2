//go:build !cuda

package cuda

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// Device is a GPU; in builds without the cuda tag there is none to open.
// It embeds runtime.Device only so that programs written against the CUDA
// build (passing a *Device where a runtime.Device is wanted) compile without
// the tag too; Open never returns one.
type Device struct{ runtime.Device }

// Open fails: this binary was built without the cuda tag.
func Open(index int) (*Device, error) { return OpenWith(index, Options{}) }

// OpenWith fails: this binary was built without the cuda tag.
func OpenWith(index int, _ Options) (*Device, error) {
	return nil, fmt.Errorf("cuda:%d: %w", index, ErrNotBuilt)
}
