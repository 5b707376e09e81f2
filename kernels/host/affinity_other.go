//go:build !linux

package host

import (
	"fmt"
	goruntime "runtime"
)

func allowedCPUs() ([]int, error) {
	return nil, fmt.Errorf("host: pinning pool workers to CPUs (FT_HOST_AFFINITY) is not supported on %s", goruntime.GOOS)
}

func pinThread(int) error {
	return fmt.Errorf("host: pinning pool workers to CPUs (FT_HOST_AFFINITY) is not supported on %s", goruntime.GOOS)
}

func threadCPUs() ([]int, error) { return allowedCPUs() }
