package offload

import (
	"fmt"
	"math"
)

// The host's DRAM read bandwidth: the copy engine's reads of the streamed
// units' pinned blocks and the host units' weight reads share it
// (planner_share.go). The shared-read model is off unless the host backend
// turns it on: the engine asks it once, when it first fills the host fields
// of a plan input, through HostReadMeasurer (kernels/host's backend answers
// by FT_HOST_DRAM_GBPS: unset or 0 off, "measure" its STREAM-like read, the
// figure `infer bench-host` prints, N that many GB/s). A backend that does
// not implement HostReadMeasurer leaves the model off; an error from it (a
// malformed FT_HOST_DRAM_GBPS) is returned from planning, not papered over.

// HostReadMeasurer is implemented by a host backend that measures the
// host's DRAM read bandwidth (bytes a second; a STREAM-like read on all its
// threads). A result of 0 with no error turns the shared-read model off
// (host units run at their own rate beside the copies).
type HostReadMeasurer interface {
	HostReadBandwidth() (float64, error)
}

// measureHostDRAM returns the DRAM read figure for the planner (0: the
// shared-read model off) and where it came from (for traces).
func (e *engine) measureHostDRAM() (float64, string, error) {
	rm, ok := e.cfg.HostBackend.(HostReadMeasurer)
	if !ok {
		return 0, "off", nil
	}
	bw, err := rm.HostReadBandwidth()
	switch {
	case err != nil:
		return 0, "", fmt.Errorf("the host's DRAM read bandwidth: %w", err)
	case math.IsInf(bw, 0) || !(bw >= 0):
		return 0, "", fmt.Errorf("the host's DRAM read bandwidth: the host backend reports %v bytes/s", bw)
	case bw == 0:
		return 0, "off", nil
	}
	return bw, "measured", nil
}

// HostReadBandwidth is the host's DRAM read bandwidth (bytes a second) the
// planner's shared-read model uses, 0 before INFERENCE, without a host
// backend, or with the model turned off.
func (m *Manager) HostReadBandwidth() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil {
		return 0
	}
	return m.e.hostDRAM
}
