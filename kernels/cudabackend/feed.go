//go:build cuda

package cudabackend

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// Device-fed greedy decoding (kernels.TokenFeeder): a captured decode
// step ends with argmax_feed (kernels/cuda/elementwise.cu), which picks the
// step's token with many blocks, writes it into the step buffer's token
// slot, advances the step buffer's position and stores the pick in a ring
// of host memory mapped into the device, at the slot of a launch counter
// the kernel keeps on the device. The host counts the same launches (eager
// ArgmaxFeed calls and the ArgmaxFeed nodes of each replayed graph, all on
// the one compute stream, so in the same order), replays the next step
// before it reads a pick, and reads it after the step's event (PostFed,
// FedToken): no synchronous copy sits between two steps. A posted pick is
// never lost: before a launch could take the ring past a posted ticket's
// slot (another Generate replaying thousands of steps while this one's
// OnToken stalls), harvest waits for that ticket's event (long completed)
// and keeps its pick on the host, where FedToken finds it.

// asyncDecodeFromEnv is FT_ASYNC_DECODE unset, "" or "1" (checked by
// checkEnvSwitches): on by default since s14a measured it faster with the
// same tokens; "0" keeps the synchronous loop.
func asyncDecodeFromEnv() bool { return os.Getenv("FT_ASYNC_DECODE") != "0" }

const (
	feedRing    = 4096 // ring slots (a power of two), indexed by launch
	feedThreads = 256  // threads a block of argmax_feed
	feedMinRun  = 256  // fewest elements a block scans
	feedBlocks  = 1024 // most blocks (the scratch's partials)
)

// feedState is the backend's device-fed decoding state.
type feedState struct {
	scratch  *runtime.DeviceBuffer // [0] the last-block counter, [1] the launch counter, then pv, pi, pbad of feedBlocks each
	ring     *runtime.DeviceBuffer // feedRing int32 picks, host memory mapped into the device
	ringHost []byte
	launched uint64                 // argmax_feed launches enqueued (eager and replayed)
	captured int                    // ArgmaxFeed calls recorded by the capture in progress
	posted   map[uint64]*cuda.Event // PostFed's tickets not yet read, with their events
	read     map[uint64]int32       // posted tickets' picks harvested from the ring before their slot is reused, not yet read
	sets     uint64                 // SetStep calls
}

func (f *feedState) free() {
	f.scratch.Free()
	f.ring.Free()
	f.scratch, f.ring, f.ringHost, f.posted, f.read = nil, nil, nil, nil, nil
	f.launched = 0 // the next scratch starts its launch counter from 0 too
}

var _ kernels.TokenFeeder = (*Backend)(nil)

// FeedsTokens reports whether device-fed decoding is on (AsyncDecode; New
// sets it unless FT_ASYNC_DECODE=0) (kernels.TokenFeeder).
func (b *Backend) FeedsTokens() bool { return b.AsyncDecode }

// StepSets counts SetStep calls (kernels.TokenFeeder).
func (b *Backend) StepSets() uint64 { return b.feed.sets }

// ensureFeed makes argmax_feed's scratch (zeroed through the aux stream,
// synchronously) and the mapped ring, before any capture (CaptureStep
// calls it when AsyncDecode is set) so that they never move.
func (b *Backend) ensureFeed() error {
	if b.feed.scratch == nil {
		n := int64(16 + 12*feedBlocks)
		buf, err := b.dev.Alloc(n, "argmax feed scratch")
		if err != nil {
			return err
		}
		if err := b.aux.Upload(buf.Ptr(), make([]byte, n)); err != nil {
			buf.Free()
			return err
		}
		b.feed.scratch = buf
	}
	if b.feed.ring == nil {
		buf, host, err := b.dev.AllocMapped(4*feedRing, "argmax feed ring")
		if err != nil {
			return err
		}
		b.feed.ring, b.feed.ringHost = buf, host
	}
	return nil
}

// harvest moves the pick of every posted ticket whose ring slot the next
// k launches would reuse (launched+k ≥ ticket+feedRing) into read, after
// its event: call it before enqueueing k argmax_feed launches (an eager
// ArgmaxFeed, a graph's Replay).
func (f *feedState) harvest(k uint64) error {
	end := f.launched + k
	for t, e := range f.posted {
		if t+feedRing > end {
			continue
		}
		if err := e.Synchronize(); err != nil {
			return fmt.Errorf("cudabackend: keeping the pick of ticket %d: %w", t, err)
		}
		if f.read == nil {
			f.read = map[uint64]int32{}
		}
		f.read[t] = f.slot(t)
		delete(f.posted, t)
	}
	return nil
}

// slot is the ring's pick of ticket t (its launch has completed).
func (f *feedState) slot(t uint64) int32 {
	i := (t - 1) % feedRing
	return atomic.LoadInt32((*int32)(unsafe.Pointer(&f.ringHost[4*i])))
}

// feedGrid is argmax_feed's grid and elements a block for a row of V.
func (b *Backend) feedGrid(V int) (blocks, chunk int) {
	blocks = min(max(b.sms, 1), feedBlocks, (V+feedMinRun-1)/feedMinRun)
	blocks = max(blocks, 1)
	chunk = (V + blocks - 1) / blocks
	return (V + chunk - 1) / chunk, chunk
}

// ArgmaxFeed enqueues argmax_feed over the one-row logits x[1,V] (F32 or
// BF16): the pick goes to the step buffer's token, the position advances
// and the ring's slot of the launch receives the pick
// (kernels.TokenFeeder). It is capturable (CaptureStep).
func (b *Backend) ArgmaxFeed(x *runtime.Tensor) error {
	if err := b.onDevice("ArgmaxFeed", "x", x); err != nil {
		return err
	}
	if x.DType() != runtime.F32 && x.DType() != runtime.BF16 {
		return fmt.Errorf("cudabackend.ArgmaxFeed: x is %v, want F32 or BF16", x.DType())
	}
	V := x.Dim(-1)
	if V == 0 || x.NumElements() != V {
		return fmt.Errorf("cudabackend.ArgmaxFeed: x %v is not one non-empty row", x.Shape())
	}
	if b.capturing && (b.feed.scratch == nil || b.feed.ring == nil || b.step == nil) {
		// Making them would allocate and upload on the capturing stream.
		return errors.New("cudabackend.ArgmaxFeed: inside a capture without the feed's buffers (CaptureStep makes them when AsyncDecode is set)")
	}
	if err := b.ensureStep(); err != nil {
		return err
	}
	if err := b.ensureFeed(); err != nil {
		return err
	}
	if !b.capturing {
		if err := b.feed.harvest(1); err != nil {
			return err
		}
	}
	blocks, chunk := b.feedGrid(V)
	s := b.feed.scratch.Ptr()
	pv, pi, pbad := s+16, s+16+4*feedBlocks, s+16+8*feedBlocks
	if err := b.k.argmaxFeed.Launch(b.s, cuda.Dim3{X: blocks}, cuda.Dim3{X: feedThreads}, 0,
		cuda.Ptr(x.Ptr()), cuda.I32(int(x.DType())), cuda.I32(V), cuda.I32(chunk),
		cuda.Ptr(pv), cuda.Ptr(pi), cuda.Ptr(pbad), cuda.Ptr(s), cuda.Ptr(s+4),
		cuda.Ptr(b.step.Ptr()), cuda.Ptr(b.feed.ring.Ptr()), cuda.I32(feedRing-1)); err != nil {
		return err
	}
	if b.capturing {
		b.feed.captured++
	} else {
		b.feed.launched++
	}
	return nil
}

// PostFed records an event after the work enqueued so far and returns the
// ticket of the last argmax_feed launch (kernels.TokenFeeder).
func (b *Backend) PostFed() (uint64, error) {
	if b.feed.launched == 0 {
		return 0, errors.New("cudabackend.PostFed: no ArgmaxFeed has been enqueued")
	}
	e, err := b.s.RecordEvent()
	if err != nil {
		return 0, err
	}
	if b.feed.posted == nil {
		b.feed.posted = map[uint64]*cuda.Event{}
	}
	t := b.feed.launched
	b.feed.posted[t] = e
	return t, nil
}

// FedToken waits for the argmax_feed launch of a ticket and returns its
// pick (kernels.TokenFeeder): from the picks harvest kept, else from the
// ring after the ticket's event. It waits before any error too (for an
// unknown ticket, for all the stream's work), so a caller that reads a
// ticket to drain its step may free the step's buffers next.
func (b *Backend) FedToken(ticket uint64) (int32, error) {
	if v, ok := b.feed.read[ticket]; ok {
		delete(b.feed.read, ticket)
		return v, nil
	}
	e := b.feed.posted[ticket]
	if e == nil {
		err := fmt.Errorf("cudabackend.FedToken: ticket %d is not posted (or was read)", ticket)
		if b.s != nil {
			if serr := b.s.Synchronize(); serr != nil {
				err = errors.Join(err, serr)
			}
		}
		return 0, err
	}
	delete(b.feed.posted, ticket)
	if err := e.Synchronize(); err != nil {
		return 0, fmt.Errorf("cudabackend.FedToken: ticket %d: %w", ticket, err)
	}
	if ticket+feedRing <= b.feed.launched { // harvest keeps this from happening
		return 0, fmt.Errorf("cudabackend.FedToken: ticket %d was overwritten by %d later picks: %w",
			ticket, b.feed.launched-ticket, kernels.ErrFedLost)
	}
	return b.feed.slot(ticket), nil
}
