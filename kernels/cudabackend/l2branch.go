//go:build cuda

package cudabackend

import (
	"fmt"
	"os"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// L2 prefetch on a graph branch (kernels.L2Brancher, kernels/cuda/l2branch.cu):
// ForkL2Prefetch records an event on the compute stream, makes the branch
// stream wait for it and launches l2_branch_prefetch there; JoinL2Prefetch
// records an event on the branch and makes the compute stream wait for it.
// Under stream capture the branch stream joins the capture through the
// first wait (a graph branch: the prefetch node depends on the kernel in
// front of it, and no node on the compute stream depends on it before the
// join); CaptureStep joins a branch left open before it ends the capture,
// so the graph is always well-formed. The prefetch kernel is not in
// dependentLaunchKernels (pdl.go): it is launched plainly, after the full
// completion of the kernel before the fork; the compute stream's kernels
// keep their programmatic edges to each other.
//
// Measured earlier and removed (fa9562b): the same prefetch in the compute
// stream's dependent-launch chain, and from inside the norms and attention;
// both put the prefetch's time on the critical path.

// l2BranchFromEnv is New's reading of FT_L2_BRANCH, FT_L2_BRANCH_MIB,
// FT_L2_BRANCH_BLOCKS and FT_L2_BRANCH_MODE (off unless FT_L2_BRANCH is set).
func l2BranchFromEnv() (kernels.L2BranchPlan, error) {
	return kernels.ParseL2Branch(os.Getenv("FT_L2_BRANCH"), os.Getenv("FT_L2_BRANCH_MIB"),
		os.Getenv("FT_L2_BRANCH_BLOCKS"), os.Getenv("FT_L2_BRANCH_MODE"))
}

// l2BranchHighPriority is FT_L2_BRANCH_PRIO: "" or "high" (the default)
// makes the branch stream at the context's highest priority, so that its
// prefetch blocks take SM slots before blocks of the compute stream's
// kernels launched early by dependent launch; "normal" at the compute
// stream's.
func l2BranchHighPriority() (bool, error) {
	switch v := os.Getenv("FT_L2_BRANCH_PRIO"); v {
	case "", "high":
		return true, nil
	case "normal":
		return false, nil
	default:
		return false, fmt.Errorf("FT_L2_BRANCH_PRIO %q: want high or normal", v)
	}
}

// l2Branch is the backend's branch state.
type l2Branch struct {
	plan    kernels.L2BranchPlan
	s       *cuda.Stream // the branch stream, made by SetL2Branch
	pending bool         // a fork not yet joined
	forks   int          // forks enqueued (tests)
}

// L2Branch is the plan the decoder follows (kernels.L2Brancher).
func (b *Backend) L2Branch() kernels.L2BranchPlan { return b.l2br.plan }

// SetL2Branch sets the plan (New sets FT_L2_BRANCH's) and makes the branch
// stream (at FT_L2_BRANCH_PRIO's priority) the first time a plan forks
// anywhere. Call it outside a capture.
func (b *Backend) SetL2Branch(p kernels.L2BranchPlan) error {
	if p.Kinds != 0 && b.l2br.s == nil {
		high, err := l2BranchHighPriority()
		if err != nil {
			return fmt.Errorf("cudabackend.SetL2Branch: %w", err)
		}
		s, err := b.dev.NewCUDAStreamPriority("cudabackend L2 branch", high)
		if err != nil {
			return fmt.Errorf("cudabackend.SetL2Branch: %w", err)
		}
		b.l2br.s = s
	}
	if p.Blocks < 1 {
		p.Blocks = kernels.L2BranchDefaults.Blocks
	}
	b.l2br.plan = p
	return nil
}

// L2BranchForks is the number of prefetches forked so far (for tests: a
// plan that forks nowhere would pass them trivially).
func (b *Backend) L2BranchForks() int { return b.l2br.forks }

// ForkL2Prefetch enqueues a prefetch of regions on the branch
// (kernels.L2Brancher); nothing when they hold no bytes.
func (b *Backend) ForkL2Prefetch(regions []kernels.L2Region) error {
	if err := kernels.CheckL2Regions(b.dev, regions); err != nil {
		return err
	}
	var p [3]uintptr
	var n [3]int64
	total := int64(0)
	for i, r := range regions {
		p[i], n[i] = r.T.Ptr(), r.Bytes
		total += r.Bytes
	}
	if total == 0 {
		return nil
	}
	side := b.l2br.s
	if side == nil {
		return fmt.Errorf("cudabackend.ForkL2Prefetch: no branch stream (SetL2Branch with a plan first)")
	}
	ev, err := b.s.RecordEvent()
	if err != nil {
		return err
	}
	if err := side.Wait(ev); err != nil {
		return err
	}
	b.l2br.pending = true // joined even if the launch fails: the wait alone puts the branch in a capture
	if err := b.k.l2branch.LaunchBytes(side, total, cuda.Dim3{X: b.l2br.plan.Blocks}, cuda.Dim3{X: 128}, 0,
		cuda.Ptr(p[0]), cuda.I64(n[0]), cuda.Ptr(p[1]), cuda.I64(n[1]), cuda.Ptr(p[2]), cuda.I64(n[2]),
		cuda.I32(b.l2br.plan.Mode)); err != nil {
		return err
	}
	b.l2br.forks++
	return nil
}

// JoinL2Prefetch makes the compute stream wait for the branch
// (kernels.L2Brancher); nothing when no fork is pending.
func (b *Backend) JoinL2Prefetch() error {
	if !b.l2br.pending {
		return nil
	}
	ev, err := b.l2br.s.RecordEvent()
	if err != nil {
		return err
	}
	if err := b.s.Wait(ev); err != nil {
		return err
	}
	b.l2br.pending = false
	return nil
}

// joinedCapture is fn followed by JoinL2Prefetch (CaptureStep's: a branch
// left open would fail the capture with CUDA_ERROR_STREAM_CAPTURE_UNJOINED).
func (b *Backend) joinedCapture(fn func() error) func() error {
	return func() error {
		err := fn()
		if jerr := b.JoinL2Prefetch(); err == nil {
			err = jerr
		}
		return err
	}
}

var _ kernels.L2Brancher = (*Backend)(nil)
