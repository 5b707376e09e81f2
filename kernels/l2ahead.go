package kernels

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// L2Region is the first Bytes bytes of tensor T: memory a backend may ask
// its device's L2 cache to bring in ahead of the kernel that reads it.
type L2Region struct {
	T     *runtime.Tensor
	Bytes int64
}

// L2AheadBudget is how many bytes of the next projection's weights each
// latency-bound kernel of a one-token decode step prefetches into L2 while
// it runs (L2Aheader): O during decode attention (o_proj), QKV during the
// RMSNorm in front of q/k/v, MLP during the one in front of gate·up (split
// evenly between gate and up).
type L2AheadBudget struct {
	O, QKV, MLP int64
}

// L2Aheader is implemented by backends whose RMSNorm and one-sequence
// decode attention kernels can prefetch other memory into L2 at their
// start, adding no launch (the CUDA backend, FT_L2_AHEAD). A prefetch is a
// hint: it changes no value any op computes.
type L2Aheader interface {
	// L2AheadBudget is the budget the decoder follows; all zero: off.
	L2AheadBudget() L2AheadBudget
	// SetL2Ahead makes the RMSNorm and decode attention ops that follow
	// prefetch regions (at most two, each on the backend's device, Bytes
	// at most the tensor's) where their kernel can; SetL2Ahead() with no
	// regions stops it. Callers set it just before one op and clear it
	// right after.
	SetL2Ahead(regions ...L2Region) error
}

// CheckL2Regions checks SetL2Ahead's regions for a backend on dev.
func CheckL2Regions(dev runtime.Device, rs []L2Region) error {
	if len(rs) > 2 {
		return fmt.Errorf("SetL2Ahead: %d regions, at most 2", len(rs))
	}
	for i, r := range rs {
		if r.T == nil {
			return fmt.Errorf("SetL2Ahead: region %d has no tensor", i)
		}
		if r.T.Device() != dev {
			return fmt.Errorf("SetL2Ahead: region %d's tensor %v is on %s, not %s", i, r.T.Shape(), r.T.Device().Name(), dev.Name())
		}
		if r.Bytes < 0 || r.Bytes > r.T.NumBytes() {
			return fmt.Errorf("SetL2Ahead: region %d: %d bytes of a tensor %v of %d bytes", i, r.Bytes, r.T.Shape(), r.T.NumBytes())
		}
	}
	return nil
}

// ParseL2AheadBudget reads FT_L2_AHEAD's value: "" or "0" off (all zero);
// "1" or "last" the default budget def; or "O,QKV,MLP" in MiB (e.g.
// "24,8,8"). It also says whether lines are asked for with the evict_last
// policy ("1", "last" and the MiB form; "normal" is def with the normal
// policy).
func ParseL2AheadBudget(s string, def L2AheadBudget) (b L2AheadBudget, last bool, err error) {
	switch s {
	case "", "0":
		return L2AheadBudget{}, false, nil
	case "1", "last":
		return def, true, nil
	case "normal":
		return def, false, nil
	}
	var o, q, m int64
	if n, e := fmt.Sscanf(s, "%d,%d,%d", &o, &q, &m); e != nil || n != 3 || o < 0 || q < 0 || m < 0 || o > 1024 || q > 1024 || m > 1024 {
		return L2AheadBudget{}, false, fmt.Errorf("FT_L2_AHEAD %q: want \"\", \"0\", \"1\", \"last\", \"normal\" or three MiB counts \"O,QKV,MLP\" of at most 1024", s)
	}
	return L2AheadBudget{O: o << 20, QKV: q << 20, MLP: m << 20}, true, nil
}
