package kernels

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/flextensor-go/flextensor/runtime"
)

// L2 prefetch on a graph branch (FT_L2_BRANCH on the CUDA backend): in a
// one-token decode step the kernels between two projections (RoPE and the
// KV store, decode attention, the RMSNorms) are latency-bound and leave
// HBM and most SMs idle. A backend that implements L2Brancher forks a
// second stream off its compute stream at such a point, launches a
// prefetch of the next projection's first weight bytes into L2 there, and
// joins it back later. Nothing on the compute stream waits for the
// prefetch until the join (the end of the layer), so the prefetch runs
// beside the latency-bound kernels instead of in front of them. A prefetch
// is a hint: it changes no value any op computes.

// L2BranchKind is one of the points a decoder layer forks a prefetch at.
type L2BranchKind uint8

const (
	// L2BranchO prefetches the layer's o_proj weight after its q/k/v
	// projection, beside RoPE and decode attention.
	L2BranchO L2BranchKind = 1 << iota
	// L2BranchQKV prefetches the first bytes of the layer's q, k and v
	// weights (in that order) at the start of the layer, beside the
	// RMSNorm in front of them.
	L2BranchQKV
	// L2BranchGU prefetches the first bytes of the gate and up weights
	// (half of the budget each) after the output projection, beside the
	// post-attention RMSNorm.
	L2BranchGU
)

// String is the kind as FT_L2_BRANCH names it.
func (k L2BranchKind) String() string {
	switch k {
	case L2BranchO:
		return "o"
	case L2BranchQKV:
		return "qkv"
	case L2BranchGU:
		return "gu"
	}
	return fmt.Sprintf("L2BranchKind(%d)", uint8(k))
}

// L2 prefetch modes (L2BranchPlan.Mode): how the prefetch kernel asks L2
// for the bytes.
const (
	// L2BranchBulk: cp.async.bulk.prefetch.L2 over 4 KiB chunks where the
	// module was compiled for sm_90 by CUDA 12 or later, else L2BranchLine.
	L2BranchBulk = 0
	// L2BranchLine: one prefetch.global.L2 per 128-byte line.
	L2BranchLine = 1
	// L2BranchLast: one prefetch.global.L2::evict_last per 128-byte line.
	L2BranchLast = 2
)

// L2BranchPlan is what a one-token decode step prefetches on the branch.
type L2BranchPlan struct {
	// Kinds is the set of fork points (an OR of L2BranchKind); 0 is off.
	Kinds L2BranchKind
	// O, QKV and GU cap the bytes each fork point prefetches.
	O, QKV, GU int64
	// Blocks is the prefetch kernel's grid (blocks of 128 threads).
	Blocks int
	// Mode is L2BranchBulk, L2BranchLine or L2BranchLast.
	Mode int
}

// Has reports whether the plan forks at k.
func (p L2BranchPlan) Has(k L2BranchKind) bool { return p.Kinds&k != 0 }

// Cap is the byte cap of fork point k (0 for a kind not in the plan).
func (p L2BranchPlan) Cap(k L2BranchKind) int64 {
	if !p.Has(k) {
		return 0
	}
	switch k {
	case L2BranchO:
		return p.O
	case L2BranchQKV:
		return p.QKV
	case L2BranchGU:
		return p.GU
	}
	return 0
}

// L2BranchDefaults are the caps, grid and mode without FT_L2_BRANCH_MIB,
// FT_L2_BRANCH_BLOCKS and FT_L2_BRANCH_MODE (Llama-3-8B shape on the H200,
// 50 MB of L2, ~4 TB/s: decode attention and RoPE take ~10-13 µs, about
// 40 MB of HBM time, each RMSNorm ~3 µs, ~12 MB).
var L2BranchDefaults = L2BranchPlan{O: 24 << 20, QKV: 8 << 20, GU: 8 << 20, Blocks: 48, Mode: L2BranchBulk}

// ParseL2Branch reads a plan as the environment spells it: kinds
// (FT_L2_BRANCH: "", "0" off; "o", "qkv", "gu" or a comma list of them;
// "all" for the three), mib (FT_L2_BRANCH_MIB: "" for the defaults, one
// number of MiB for every kind, or three "O,QKV,GU"), blocks
// (FT_L2_BRANCH_BLOCKS: "" for 48, else 1..1024) and mode
// (FT_L2_BRANCH_MODE: "" or "bulk", "line", "last").
func ParseL2Branch(kinds, mib, blocks, mode string) (L2BranchPlan, error) {
	p := L2BranchDefaults
	switch kinds {
	case "", "0":
	case "all":
		p.Kinds = L2BranchO | L2BranchQKV | L2BranchGU
	default:
		for _, f := range strings.Split(kinds, ",") {
			switch strings.TrimSpace(f) {
			case "o":
				p.Kinds |= L2BranchO
			case "qkv":
				p.Kinds |= L2BranchQKV
			case "gu":
				p.Kinds |= L2BranchGU
			default:
				return L2BranchPlan{}, fmt.Errorf("FT_L2_BRANCH %q: %q is not o, qkv, gu or all", kinds, f)
			}
		}
	}
	if mib != "" {
		fs := strings.Split(mib, ",")
		if len(fs) != 1 && len(fs) != 3 {
			return L2BranchPlan{}, fmt.Errorf("FT_L2_BRANCH_MIB %q: want one number of MiB or three (O,QKV,GU)", mib)
		}
		var v [3]int64
		for i, f := range fs {
			n, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || n < 0 || n > 1024 {
				return L2BranchPlan{}, fmt.Errorf("FT_L2_BRANCH_MIB %q: %q is not a number of MiB from 0 to 1024", mib, f)
			}
			v[i] = int64(n * (1 << 20))
		}
		if len(fs) == 1 {
			v[1], v[2] = v[0], v[0]
		}
		p.O, p.QKV, p.GU = v[0], v[1], v[2]
	}
	if blocks != "" {
		n, err := strconv.Atoi(strings.TrimSpace(blocks))
		if err != nil || n < 1 || n > 1024 {
			return L2BranchPlan{}, fmt.Errorf("FT_L2_BRANCH_BLOCKS %q: want a block count from 1 to 1024", blocks)
		}
		p.Blocks = n
	}
	switch mode {
	case "", "bulk":
		p.Mode = L2BranchBulk
	case "line":
		p.Mode = L2BranchLine
	case "last":
		p.Mode = L2BranchLast
	default:
		return L2BranchPlan{}, fmt.Errorf("FT_L2_BRANCH_MODE %q: want bulk, line or last", mode)
	}
	return p, nil
}

// L2Region is the first Bytes bytes of tensor T's memory.
type L2Region struct {
	T     *runtime.Tensor
	Bytes int64
}

// PlanL2Regions is what a fork point prefetches of ts within budget bytes
// on dev: with split false the first bytes of ts in order (a prefix of the
// first weight, then of the next, ...), with split true an even share of
// the budget per weight (what one weight lacks goes to the others), as a
// GEMV that reads rows of all of ts together (gate·up) starts them. Nil
// weights and weights not on dev are left out; weights of no bytes give no
// region.
func PlanL2Regions(dev runtime.Device, budget int64, split bool, ts ...*runtime.Tensor) []L2Region {
	var use []*runtime.Tensor
	for _, t := range ts {
		if t != nil && t.Device() == dev && t.NumBytes() > 0 {
			use = append(use, t)
		}
	}
	if budget <= 0 || len(use) == 0 {
		return nil
	}
	take := make([]int64, len(use))
	if !split {
		left := budget
		for i, t := range use {
			take[i] = min(left, t.NumBytes())
			left -= take[i]
		}
	} else {
		// Water-fill: each round gives every weight with bytes left an even
		// share of what is left; small weights cap out and the rest goes on.
		left := budget
		for left > 0 {
			open := 0
			for i, t := range use {
				if take[i] < t.NumBytes() {
					open++
				}
			}
			if open == 0 {
				break
			}
			share := max(1, left/int64(open))
			for i, t := range use {
				if left == 0 {
					break
				}
				n := min(share, t.NumBytes()-take[i], left)
				take[i] += n
				left -= n
			}
		}
	}
	var rs []L2Region
	for i, t := range use {
		if take[i] > 0 {
			rs = append(rs, L2Region{T: t, Bytes: take[i]})
		}
	}
	return rs
}

// L2Brancher is implemented by backends that can prefetch weights into
// their device's L2 on a branch off the compute stream (the CUDA backend).
// Forks and joins are enqueued like ops (and recorded into captured
// graphs: the branch becomes a graph branch).
type L2Brancher interface {
	// L2Branch is the plan the decoder follows (FT_L2_BRANCH...).
	L2Branch() L2BranchPlan
	// ForkL2Prefetch enqueues, on a second stream that waits for the work
	// enqueued on the compute stream so far, a prefetch of regions (at
	// most 3; all on the backend's device). Work enqueued on the compute
	// stream afterwards does not wait for it.
	ForkL2Prefetch(regions []L2Region) error
	// JoinL2Prefetch makes work enqueued on the compute stream afterwards
	// wait for the prefetches forked so far; nothing when none is pending.
	JoinL2Prefetch() error
}

// CheckL2Regions checks ForkL2Prefetch's regions for a backend on dev.
func CheckL2Regions(dev runtime.Device, rs []L2Region) error {
	if len(rs) > 3 {
		return fmt.Errorf("ForkL2Prefetch: %d regions, at most 3", len(rs))
	}
	for i, r := range rs {
		if r.T == nil {
			return fmt.Errorf("ForkL2Prefetch: region %d has no tensor", i)
		}
		if r.T.Device() != dev {
			return fmt.Errorf("ForkL2Prefetch: region %d: tensor %v is on %s, not %s", i, r.T.Shape(), r.T.Device().Name(), dev.Name())
		}
		if r.Bytes < 0 || r.Bytes > r.T.NumBytes() {
			return fmt.Errorf("ForkL2Prefetch: region %d: %d bytes of a tensor %v of %d bytes", i, r.Bytes, r.T.Shape(), r.T.NumBytes())
		}
	}
	return nil
}
