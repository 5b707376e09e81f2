//go:build cuda

package cudabackend

import (
	"encoding/binary"
	"fmt"
	"os"

	kcuda "github.com/flextensor-go/flextensor/kernels/cuda"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// FT_BLOCK_TRACE=FILE is a timing diagnostic: the main kernel module is
// compiled traced (kcuda.Traced, -DFT_BLOCK_TRACE), so that every block of
// every kernel records on the device when it started, when its
// dependent-launch wait returned and when it ended (common.cuh's block
// tracing). BlockTraceReset empties the record buffer and BlockTraceWrite
// appends a summary of what was recorded since, one line a launch, to FILE.
// It shows what a kernel profile of serialized launches cannot: how the
// launches of a replayed step overlap under dependent launch and where the
// device waits. The records cost each block a few instructions and an
// atomic; kernels near their register limit may spill.

// blockTraceSMs and blockTraceRecords are common.cuh's FT_TRACE_SMS (the
// record buffer's regions, one an SM) and how many block records
// (blockTraceBytes each) a region holds: a decode step of a 32-layer model records ~90,000
// blocks, ~700 an SM of an H200.
const (
	blockTraceSMs     = 256
	blockTraceRecords = 4096
)

// blockTrace is a traced module's record buffer and the kernels' names by
// their index in the traced source.
type blockTrace struct {
	path  string
	names []string
	buf   *runtime.DeviceBuffer
	n     uintptr // ft_trace_n's device address (a counter an SM)
}

// blockTraceFromEnv is FT_BLOCK_TRACE's file ("" off).
func blockTraceFromEnv() string { return os.Getenv("FT_BLOCK_TRACE") }

// loadTraced compiles the main kernels traced and points their record
// buffer at a fresh device allocation.
func loadTraced(dev *cuda.Device, path string) (*cuda.Module, *blockTrace, error) {
	src, names, err := kcuda.Traced(kcuda.Source())
	if err != nil {
		return nil, nil, err
	}
	mod, err := dev.LoadModule("flextensor_kernels_traced.cu", src, "-DFT_BLOCK_TRACE")
	if err != nil {
		return nil, nil, err
	}
	buf, err := dev.Alloc(blockTraceSMs*blockTraceRecords*blockTraceBytes, "block trace")
	if err != nil {
		return nil, nil, err
	}
	t := &blockTrace{path: path, names: names, buf: buf}
	s := dev.ComputeStream()
	set := func(name string, v ...uint64) (uintptr, error) {
		p, size, err := mod.Global(name)
		if err != nil {
			return 0, err
		}
		if size != int64(8*len(v)) {
			return 0, fmt.Errorf("block trace: %s is %d bytes, want %d", name, size, 8*len(v))
		}
		var raw []byte
		for _, x := range v {
			raw = binary.LittleEndian.AppendUint64(raw, x)
		}
		return p, s.Upload(p, raw)
	}
	if _, err := set("ft_trace_buf", uint64(buf.Ptr())); err != nil {
		return nil, nil, err
	}
	if _, err := set("ft_trace_cap", blockTraceRecords); err != nil {
		return nil, nil, err
	}
	if t.n, err = set("ft_trace_n", make([]uint64, blockTraceSMs)...); err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(os.Stderr, "FT_BLOCK_TRACE=%s: kernels traced (a timing diagnostic; every block records its times)\n", path)
	return mod, t, s.Synchronize()
}

// BlockTraceOn reports whether the kernels are traced (FT_BLOCK_TRACE).
func (b *Backend) BlockTraceOn() bool { return b.k.trace != nil }

// BlockTraceReset drops the block records so far (FT_BLOCK_TRACE), after
// the work queued before it; without tracing it does nothing.
func (b *Backend) BlockTraceReset() error {
	if b.k.trace == nil {
		return nil
	}
	if err := b.s.Synchronize(); err != nil {
		return err
	}
	return b.s.Upload(b.k.trace.n, make([]byte, 8*blockTraceSMs))
}

// BlockTraceWrite appends to FT_BLOCK_TRACE's file the launches recorded
// since BlockTraceReset, after waiting for the device: a header with label,
// then a line a launch in order of its first block's start, with times in
// µs from the first: first start, the earliest and median end of the
// dependent-launch wait, the median and last block end, blocks seen of the
// grid's, SMs used, the kernel's name, and where its blocks placed
// FT_TRACE_MARK, each mark's median and latest time. Without tracing it
// does nothing.
func (b *Backend) BlockTraceWrite(label string) error {
	t := b.k.trace
	if t == nil {
		return nil
	}
	if err := b.s.Synchronize(); err != nil {
		return err
	}
	counts := make([]byte, 8*blockTraceSMs)
	if err := b.s.Download(counts, t.n); err != nil {
		return err
	}
	all := make([]byte, blockTraceSMs*blockTraceRecords*blockTraceBytes)
	if err := b.s.Download(all, t.buf.Ptr()); err != nil {
		return err
	}
	var raw []byte
	lost := uint64(0)
	for sm := range blockTraceSMs {
		n := binary.LittleEndian.Uint64(counts[8*sm:])
		if n > blockTraceRecords {
			lost, n = lost+n-blockTraceRecords, blockTraceRecords
		}
		raw = append(raw, all[sm*blockTraceRecords*blockTraceBytes:][:n*blockTraceBytes]...)
	}
	f, err := os.OpenFile(t.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	werr := writeBlockTrace(f, label, t.names, raw, lost)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}
