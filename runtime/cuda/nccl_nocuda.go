//go:build !cuda

package cuda

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// DeviceCount fails: this binary was built without the cuda tag.
func DeviceCount() (int, error) { return 0, fmt.Errorf("counting CUDA devices: %w", ErrNotBuilt) }

// NewNCCLGroup fails: this binary was built without the cuda tag.
func NewNCCLGroup(devs []runtime.Device) ([]runtime.Communicator, error) {
	return nil, fmt.Errorf("NCCL: %w", ErrNotBuilt)
}

// NCCLVersion fails: this binary was built without the cuda tag.
func NCCLVersion() (int, string, error) { return 0, "", fmt.Errorf("NCCL: %w", ErrNotBuilt) }
