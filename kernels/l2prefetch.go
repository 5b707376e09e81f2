package kernels

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// L2PrefetchPlan says which weights a one-token decode step asks the GPU's
// L2 cache to bring in ahead of their projection, while the latency-bound
// kernels in front of it (RoPE, decode attention, RMSNorm) leave HBM idle.
type L2PrefetchPlan uint8

const (
	// L2PrefetchOff prefetches nothing.
	L2PrefetchOff L2PrefetchPlan = iota
	// L2PrefetchO prefetches each layer's output projection (o_proj) after
	// its q/k/v projection, ahead of RoPE and attention.
	L2PrefetchO
	// L2PrefetchAll is L2PrefetchO plus the first part of each layer's q/k/v
	// weights ahead of the RMSNorm in front of them.
	L2PrefetchAll
)

// ParseL2PrefetchPlan reads a plan as FT_L2_PREFETCH spells it: "" or "0"
// (off), "o" or "all".
func ParseL2PrefetchPlan(s string) (L2PrefetchPlan, error) {
	switch s {
	case "", "0":
		return L2PrefetchOff, nil
	case "o":
		return L2PrefetchO, nil
	case "all":
		return L2PrefetchAll, nil
	}
	return L2PrefetchOff, fmt.Errorf("L2 prefetch plan %q: want \"\", \"0\", \"o\" or \"all\"", s)
}

// String is the plan as ParseL2PrefetchPlan reads it ("0" for off).
func (p L2PrefetchPlan) String() string {
	switch p {
	case L2PrefetchOff:
		return "0"
	case L2PrefetchO:
		return "o"
	case L2PrefetchAll:
		return "all"
	}
	return fmt.Sprintf("L2PrefetchPlan(%d)", uint8(p))
}

// L2Prefetcher is implemented by backends that can ask their device's L2
// cache to load memory ahead of the kernels that read it (the CUDA backend;
// the CPU backend has no such op). A prefetch is a hint: it changes no
// value any op computes. It is enqueued like the other ops (and recorded
// into captured graphs).
type L2Prefetcher interface {
	// L2Prefetch is the plan the decoder follows with this backend
	// (FT_L2_PREFETCH on the CUDA backend).
	L2Prefetch() L2PrefetchPlan
	// PrefetchL2 asks L2 for the first bytes bytes of t's memory (bytes is
	// at most t.NumBytes(); 0 enqueues nothing). t must be on the backend's
	// device.
	PrefetchL2(t *runtime.Tensor, bytes int64) error
}

// CheckPrefetchL2 checks PrefetchL2's operands for a backend on dev: t on
// dev and 0 <= bytes <= t.NumBytes().
func CheckPrefetchL2(dev runtime.Device, t *runtime.Tensor, bytes int64) error {
	if t == nil {
		return fmt.Errorf("PrefetchL2: no tensor")
	}
	if t.Device() != dev {
		return fmt.Errorf("PrefetchL2: tensor %v is on %s, not %s", t.Shape(), t.Device().Name(), dev.Name())
	}
	if bytes < 0 || bytes > t.NumBytes() {
		return fmt.Errorf("PrefetchL2: %d bytes of a tensor %v of %d bytes", bytes, t.Shape(), t.NumBytes())
	}
	return nil
}
