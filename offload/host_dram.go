package offload

import "fmt"

// The host's DRAM read bandwidth: the copy engine's reads of the streamed
// units' pinned blocks and the host units' weight reads share it
// (planner_share.go). The engine takes it once, when it first fills the
// host fields of a plan input, from the host backend when it measures it
// (HostReadMeasurer: kernels/host's STREAM-like read, the figure `infer
// bench-host` prints); otherwise it falls back to the host backend's GEMV
// bandwidth (host.go): the host kernels alone come close to the read
// bandwidth (92-102% of it on the H200 machine), so the sharing is still
// modelled, a little pessimistically.

// HostReadMeasurer is implemented by a host backend that measures the
// host's DRAM read bandwidth (bytes a second; a STREAM-like read on all its
// threads). A result of 0 with no error turns the shared-read model off
// (host units run at their own rate beside the copies).
type HostReadMeasurer interface {
	HostReadBandwidth() (float64, error)
}

// measureHostDRAM returns the DRAM read figure for the planner and where
// it came from (for traces).
func (e *engine) measureHostDRAM() (float64, string) {
	if rm, ok := e.cfg.HostBackend.(HostReadMeasurer); ok {
		bw, err := rm.HostReadBandwidth()
		switch {
		case err == nil && bw == 0:
			return 0, "off"
		case err == nil && bw > 0:
			return bw, "measured"
		case err != nil:
			e.trace(fmt.Sprintf("host read bandwidth not measured (%v): the GEMV figure stands in", err), 0)
		}
	}
	return e.hostBW, "the GEMV figure"
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
