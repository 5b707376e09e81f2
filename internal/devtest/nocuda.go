//go:build !cuda

package devtest

import "errors"

// openCUDA fails: without the cuda tag there is no GPU backend to test.
func openCUDA() (Device, error) {
	return Device{}, errors.New("built without the cuda tag (make test-cuda runs the GPU subtests)")
}
