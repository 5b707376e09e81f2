package offload_test

import (
	"github.com/flextensor-go/flextensor/kernels/host"
	"github.com/flextensor-go/flextensor/offload"
)

// The host backend reports FT_HOST_GBPS through the interface the engine
// asks (a compile-time check: a renamed method would silently drop the
// switch).
var _ offload.HostBandwidthMeasurer = (*host.Backend)(nil)
