package runtime

import (
	"errors"
	"fmt"
	"sync"
)

// Communicator is one rank of a group of devices that combine tensors
// (tensor parallelism): every rank calls the same collectives in the same
// order, each on its own device's stream. The NCCL group of package
// runtime/cuda and the in-process CPU group (NewCPUGroup) implement it.
//
// A collective returns once its work is enqueued on s (a GPU) or done (the
// CPU, whose compute stream is the calling goroutine). A rank that cannot
// take part (its forward failed) must Abort the group, or the other ranks
// wait for it forever; after Abort every collective of every rank fails.
type Communicator interface {
	// Rank is this member's index, 0..Size()-1.
	Rank() int
	// Size is the number of ranks.
	Size() int
	// AllReduceSum replaces t, on every rank, with the element-wise sum of
	// every rank's t (same dtype and shape everywhere; F32 or BF16, and F16 on a GPU).
	AllReduceSum(t *Tensor, s Stream) error
	// AllGather fills dst [Size·n] on every rank with every rank's src [n]
	// in rank order.
	AllGather(dst, src *Tensor, s Stream) error
	// Abort fails the collectives waiting now and every later one, on every
	// rank, with err.
	Abort(err error)
	// Close releases this rank's resources; the group is gone when every
	// rank closed.
	Close() error
}

// ErrCommAborted is wrapped by the collectives of a group after Abort.
var ErrCommAborted = errors.New("communicator aborted")

// CPUGroup is an in-process stand-in for a collective library over CPU
// devices: ranks meet at each collective, the last to arrive combines the
// tensors and everyone leaves with the result. Sums add the ranks' values
// in rank order (rank 0 first), in float64 for F32, so the result does not
// depend on which rank arrives last.
type CPUGroup struct {
	mu      sync.Mutex
	cond    *sync.Cond
	size    int
	seq     uint64 // collectives completed
	arrived int
	inputs  []*Tensor // by rank, for the collective in progress
	outputs []*Tensor
	kind    string
	err     error // the combining step's error, for every rank of that collective
	aborted error
}

// NewCPUGroup makes a group of size ranks; Member(i) is rank i.
func NewCPUGroup(size int) (*CPUGroup, error) {
	if size <= 0 {
		return nil, fmt.Errorf("cpu group: %d ranks; want at least 1", size)
	}
	g := &CPUGroup{size: size, inputs: make([]*Tensor, size), outputs: make([]*Tensor, size)}
	g.cond = sync.NewCond(&g.mu)
	return g, nil
}

// Member is rank i of the group as a Communicator.
func (g *CPUGroup) Member(i int) Communicator { return &cpuRank{g: g, rank: i} }

// Members are the group's ranks in order.
func (g *CPUGroup) Members() []Communicator {
	out := make([]Communicator, g.size)
	for i := range out {
		out[i] = g.Member(i)
	}
	return out
}

type cpuRank struct {
	g    *CPUGroup
	rank int
}

func (r *cpuRank) Rank() int { return r.rank }
func (r *cpuRank) Size() int { return r.g.size }

func (r *cpuRank) Abort(err error) {
	if err == nil {
		err = errors.New("aborted")
	}
	g := r.g
	g.mu.Lock()
	if g.aborted == nil {
		g.aborted = fmt.Errorf("%w by rank %d: %w", ErrCommAborted, r.rank, err)
	}
	g.cond.Broadcast()
	g.mu.Unlock()
}

func (r *cpuRank) Close() error { return nil }

func (r *cpuRank) AllReduceSum(t *Tensor, s Stream) error {
	if t == nil {
		return errors.New("cpu group: all-reduce of a nil tensor")
	}
	if t.Bytes() == nil && t.NumElements() > 0 {
		return fmt.Errorf("cpu group: all-reduce of %v: not host-addressable memory", t)
	}
	return r.g.meet(r.rank, "all-reduce", t, t, reduceSum)
}

func (r *cpuRank) AllGather(dst, src *Tensor, s Stream) error {
	if dst == nil || src == nil {
		return errors.New("cpu group: all-gather of a nil tensor")
	}
	if dst.DType() != src.DType() || dst.NumElements() != src.NumElements()*r.g.size {
		return fmt.Errorf("cpu group: all-gather of %v into %v: want %d× the elements, same dtype", src, dst, r.g.size)
	}
	if (dst.Bytes() == nil || src.Bytes() == nil) && src.NumElements() > 0 {
		return fmt.Errorf("cpu group: all-gather of %v: not host-addressable memory", src)
	}
	return r.g.meet(r.rank, "all-gather", src, dst, gather)
}

// meet waits for every rank to bring its tensors to the collective named
// kind; the last one runs combine over them all.
func (g *CPUGroup) meet(rank int, kind string, in, out *Tensor, combine func(in, out []*Tensor) error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.aborted != nil {
		return g.aborted
	}
	if g.inputs[rank] != nil {
		return fmt.Errorf("cpu group: rank %d entered a %s while its previous collective is in progress", rank, kind)
	}
	if g.arrived > 0 && g.kind != kind {
		err := fmt.Errorf("cpu group: rank %d calls %s while other ranks are in %s: the ranks' collectives are out of step", rank, kind, g.kind)
		g.aborted = fmt.Errorf("%w: %w", ErrCommAborted, err)
		g.cond.Broadcast()
		return g.aborted
	}
	g.kind = kind
	g.inputs[rank], g.outputs[rank] = in, out
	g.arrived++
	seq := g.seq
	if g.arrived == g.size {
		g.err = combine(g.inputs, g.outputs)
		if g.err != nil {
			g.err = fmt.Errorf("cpu group: %s: %w", kind, g.err)
		}
		for i := range g.inputs {
			g.inputs[i], g.outputs[i] = nil, nil
		}
		g.arrived = 0
		g.seq++
		g.cond.Broadcast()
		return g.err
	}
	for g.seq == seq && g.aborted == nil {
		g.cond.Wait()
	}
	if g.seq == seq { // aborted before everyone arrived
		g.inputs[rank], g.outputs[rank] = nil, nil
		return g.aborted
	}
	return g.err
}

// reduceSum sums in[i] over ranks in rank order into every out[i] (== in[i]).
func reduceSum(in, out []*Tensor) error {
	t0 := in[0]
	for i, t := range in {
		if t.DType() != t0.DType() || !t.Shape().Equal(t0.Shape()) {
			return fmt.Errorf("rank %d brings %v, rank 0 %v: shapes and dtypes must agree", i, t, t0)
		}
	}
	n := t0.NumElements()
	switch t0.DType() {
	case F32:
		sum := make([]float64, n)
		for _, t := range in {
			for j, v := range t.F32() {
				sum[j] += float64(v)
			}
		}
		for _, t := range out {
			f := t.F32()
			for j := range f {
				f[j] = float32(sum[j])
			}
		}
	case BF16:
		sum := make([]float64, n)
		for _, t := range in {
			for j, v := range t.U16() {
				sum[j] += float64(BF16ToF32(v))
			}
		}
		for _, t := range out {
			u := t.U16()
			for j := range u {
				u[j] = F32ToBF16(float32(sum[j]))
			}
		}
	default:
		return fmt.Errorf("dtype %v is not summed on the CPU (want F32 or BF16)", t0.DType())
	}
	return nil
}

// gather concatenates in[0..] into every out.
func gather(in, out []*Tensor) error {
	n := in[0].NumBytes()
	for i, t := range in {
		if t.NumBytes() != n || t.DType() != in[0].DType() {
			return fmt.Errorf("rank %d brings %v, rank 0 %v: sizes and dtypes must agree", i, t, in[0])
		}
	}
	for _, o := range out {
		b := o.Bytes()
		for i, t := range in {
			copy(b[int64(i)*n:int64(i+1)*n], t.Bytes())
		}
	}
	return nil
}
