package offload

import (
	"fmt"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/place"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/hostmem"
)

// WeightSource is where an engine built without the weights in host memory
// (LoadModelFromProfile) reads them: the place package's Source, tensors by
// qualified name. *loader.Checkpoint is one.
type WeightSource = place.Source

// stageChunk is the size of each host staging buffer through which weights
// are uploaded, and stageBuffers their number.
const (
	stageChunk   = 64 << 20
	stageBuffers = 4
)

// stager puts an engine's weights where they go, before and between
// passes: it packs units into host blocks (pinned when the configuration
// says so) and uploads parameters and packed blocks to device buffers
// through the place package's Stager on the engine's copy stream.
type stager struct {
	dev    runtime.Device
	pinned bool
	src    WeightSource // nil: the parameters' host tensors
	// up stages reads through host buffers (taken on first use, kept
	// until freeStaging); blocks copies packed blocks, which need no
	// staging and whose bytes were reported when packed.
	up, blocks *place.Stager
	trace      func(step string, d time.Duration)
	tracing    bool // a Trace is configured
	placed     func(n int64)

	packAlloc, packRead atomic.Int64 // nanoseconds summed over packing goroutines
}

func newStager(e *engine) *stager {
	s := &stager{dev: e.dev, pinned: e.cfg.PinnedMemory, src: e.src, trace: e.trace, tracing: e.cfg.Trace != nil, placed: e.placed}
	s.up = place.NewStager(e.dev, place.StagerOptions{ChunkBytes: stageChunk, Buffers: stageBuffers,
		HostAlloc: s.hostBlock, Label: "offload upload staging", Placed: e.placed})
	s.blocks = place.NewStager(e.dev, place.StagerOptions{HostAlloc: s.hostBlock})
	return s
}

// hostBlock takes a host block: pinned from the device, or Go memory.
func (s *stager) hostBlock(n int64, label string) (*runtime.HostBuffer, error) {
	if s.pinned {
		return s.dev.AllocHost(n, label)
	}
	return runtime.NewHostBuffer(s.dev, label, make([]byte, n), nil), nil
}

// read fills dst with bytes [off, off+len(dst)) of parameter p, from the
// weight source or from its host tensor orig.
func (s *stager) read(p *nn.Parameter, orig *runtime.Tensor, off int64, dst []byte) error {
	if s.src != nil {
		return s.src.ReadAt(p.Name(), dst, off)
	}
	b := orig.Bytes()
	if b == nil {
		return fmt.Errorf("parameter %s is not in host memory", p.Name())
	}
	if off < 0 || off+int64(len(dst)) > int64(len(b)) {
		return fmt.Errorf("parameter %s: read [%d, %d) of %d bytes", p.Name(), off, off+int64(len(dst)), len(b))
	}
	copy(dst, b[off:])
	return nil
}

// pack fills a unit's host block with its parameters.
func (s *stager) pack(u *unit) error {
	h, err := s.allocBlock(u)
	if err != nil {
		return err
	}
	return s.fillBlock(u, h, nil)
}

// allocBlock takes unit u's host block.
func (s *stager) allocBlock(u *unit) (*runtime.HostBuffer, error) {
	t0 := time.Now()
	h, err := s.hostBlock(max(u.bytes, 1), "offload unit "+u.name)
	s.packAlloc.Add(int64(time.Since(t0)))
	if err == nil && packEvents != nil {
		packEvents("alloc", u.name)
	}
	return h, err
}

// fillBlock reads unit u's parameters into its block h and gives u the
// block (h is freed on an error); with a tally (FT_PACK_EVICT=1) it then
// drops their file bytes from the page cache.
func (s *stager) fillBlock(u *unit, h *runtime.HostBuffer, tally *evictTally) error {
	t1 := time.Now()
	if packEvents != nil {
		packEvents("read", u.name)
	}
	for i, p := range u.params {
		if err := s.read(p, u.orig[i], 0, h.Bytes()[u.offs[i]:u.offs[i]+u.orig[i].NumBytes()]); err != nil {
			h.Free()
			s.packRead.Add(int64(time.Since(t1)))
			return err
		}
	}
	s.packRead.Add(int64(time.Since(t1))) // the eviction below times itself
	u.host = h
	s.placed(u.bytes)
	if tally != nil {
		s.evictUnit(u, tally)
	}
	return nil
}

// packAll packs units on several goroutines (copies from memory or reads
// from files both gain from parallelism). With FT_PACK_EVICT=1 it first
// drops the open checkpoints from the page cache, then allocates every
// block, then reads, dropping each unit's file bytes after its read
// (packevict.go).
func (s *stager) packAll(units []*unit) error {
	start := time.Now()
	s.packAlloc.Store(0)
	s.packRead.Store(0)
	defer func() {
		s.trace("pack: wall", time.Since(start))
		s.trace("pack: pinned alloc", time.Duration(s.packAlloc.Load()))
		s.trace("pack: read", time.Duration(s.packRead.Load()))
	}()
	var err error
	if packEvict && len(units) > 0 {
		err = s.packEvicting(units)
	} else {
		err = s.parallel(units, s.pack)
	}
	if err != nil {
		return err
	}
	s.traceHugePages(units)
	return nil
}

// packEvicting is packAll under FT_PACK_EVICT=1.
func (s *stager) packEvicting(units []*unit) error {
	s.evictBefore()
	blocks := make(map[*unit]*runtime.HostBuffer, len(units))
	var mu sync.Mutex
	err := s.parallel(units, func(u *unit) error {
		h, err := s.allocBlock(u)
		if err == nil {
			mu.Lock()
			blocks[u] = h
			mu.Unlock()
		}
		return err
	})
	if err != nil {
		for _, h := range blocks {
			h.Free()
		}
		return err
	}
	var tally evictTally
	err = s.parallel(units, func(u *unit) error { return s.fillBlock(u, blocks[u], &tally) })
	s.traceAfter(&tally)
	return err
}

// parallel runs f on each unit on several goroutines and returns the first
// error, naming the unit.
func (s *stager) parallel(units []*unit, f func(*unit) error) error {
	work := make(chan *unit, len(units))
	for _, u := range units {
		work <- u
	}
	close(work)
	errs := make(chan error, len(units))
	workers := min(8, max(1, goruntime.GOMAXPROCS(0)), len(units))
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range work {
				if err := f(u); err != nil {
					errs <- fmt.Errorf("packing unit %s: %w", u.name, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// traceHugePages reports, with a Trace configured and pinned blocks, how
// much of the units' host blocks the kernel backs with transparent huge
// pages (this process's smaps; runtime/hostmem): the host-computed units
// read them at memory bandwidth, which 4 KiB pages cut by a third. It runs
// only under a Trace (FT_TRACE=1) and costs a read of all of
// /proc/self/smaps, ~0.1-0.14 s a pack in a CUDA process (the line's time).
func (s *stager) traceHugePages(units []*unit) {
	if !s.tracing || !s.pinned || len(units) == 0 {
		return
	}
	t0 := time.Now()
	var blocks [][]byte
	var total int64
	for _, u := range units {
		if u.host != nil {
			blocks = append(blocks, u.host.Bytes())
			total += int64(len(u.host.Bytes()))
		}
	}
	p, err := hostmem.BlockCoverage(blocks)
	if err != nil {
		s.trace(fmt.Sprintf("pinned: huge pages unknown (%v)", err), time.Since(t0))
		return
	}
	s.trace(hugePagesTrace(len(blocks), total, p), time.Since(t0))
}

// hugePagesTrace is traceHugePages' line for n blocks of total bytes:
// "pinned: X of Y MiB on huge pages", X the AnonHugePages of the mappings
// lying within the blocks' ranges (to the end of each block's last huge
// page, so X can pass Y by up to 2 MiB a block; not clamped), then those
// mappings' Rss and, counted whole and apart, the mappings that hold a
// block and reach beyond the blocks (merged with other memory), whose
// pages cannot be told apart.
func hugePagesTrace(n int, total int64, p hostmem.BlockPages) string {
	const mib = 1 << 20
	return fmt.Sprintf("pinned: %.1f of %.1f MiB on huge pages (%d blocks; mappings within them: Rss %.1f MiB; mappings reaching beyond them: AnonHugePages %.1f MiB of Rss %.1f MiB; smaps read only under FT_TRACE)",
		float64(p.InHugeKiB)/1024, float64(total)/mib, n, float64(p.InRssKiB)/1024, float64(p.OutHugeKiB)/1024, float64(p.OutRssKiB)/1024)
}

// fill writes params[i] at offs[i] of buf on the copy stream, staged
// through host buffers (reads overlap copies); it returns when the copies
// are done.
func (s *stager) fill(copy runtime.Stream, buf *runtime.DeviceBuffer, ps []*nn.Parameter, origs []*runtime.Tensor, offs []int64) error {
	pieces := make([]place.Piece, len(ps))
	for i, p := range ps {
		p, orig := p, origs[i]
		pieces[i] = place.Piece{Dst: buf, Off: offs[i], Size: orig.NumBytes(), Name: p.Name(),
			Read: func(dst []byte, off int64) error { return s.read(p, orig, off, dst) }}
	}
	return s.up.Upload(copy, pieces)
}

// copyBlock copies a packed host block to buf on the copy stream, after
// the compute stream's work so far, and returns when it is done.
func (s *stager) copyBlock(copy runtime.Stream, buf *runtime.DeviceBuffer, h *runtime.HostBuffer, n int64, name string) error {
	ev, err := s.dev.Compute().Record()
	if err != nil {
		return err
	}
	if err := copy.Wait(ev); err != nil {
		return err
	}
	return s.blocks.Upload(copy, []place.Piece{{Dst: buf, Size: n, From: h, Name: name}})
}

// freeStaging returns the upload staging buffers (a later upload takes new
// ones).
func (s *stager) freeStaging() { s.up.Free() }

// uploadFixed places the non-unit parameters on the device in one buffer.
// Parameters already on the device stay where they are; gather-only
// embedding tables of an offloading engine are left for placeHostTables,
// which puts them in mapped host memory (embedhost.go).
func (e *engine) uploadFixed() error {
	e.chooseHostTables()
	var ps []*nn.Parameter
	var origs []*runtime.Tensor
	for i, p := range e.fixed {
		if _, onHost := e.hostPending[p]; e.fixedOrig[i].Device() != e.dev && !onHost {
			ps = append(ps, p)
			origs = append(origs, e.fixedOrig[i])
		}
	}
	return e.uploadParams(ps, origs, "offload resident parameters")
}

// uploadParams copies params into one new device buffer (each at a
// blockAlign-aligned offset) and binds them to views of it.
func (e *engine) uploadParams(ps []*nn.Parameter, origs []*runtime.Tensor, label string) error {
	if len(ps) == 0 {
		return nil
	}
	offs := make([]int64, len(ps))
	var n int64
	for i, t := range origs {
		offs[i] = n
		n = alignUp(n + t.NumBytes())
	}
	buf, err := e.dev.Alloc(n, label)
	if err != nil {
		return err
	}
	if err := e.st.fill(e.copy, buf, ps, origs, offs); err != nil {
		buf.Free()
		return err
	}
	e.fixedBufs = append(e.fixedBufs, buf)
	e.fixedBytes += n
	for i, p := range ps {
		v, err := runtime.TensorOn(buf, offs[i], origs[i].DType(), origs[i].Shape())
		if err != nil {
			return err
		}
		if err := p.Bind(v); err != nil {
			return err
		}
	}
	return nil
}

// makeResident copies a packed unit to a device buffer of its own, binds
// its parameters there and frees its host block, and the block's rate with
// it (a replan that streams the unit again packs and rates a new block).
func (e *engine) makeResident(u *unit) error {
	buf, err := e.dev.Alloc(max(u.bytes, 1), "offload resident unit "+u.name)
	if err != nil {
		return err
	}
	u.dev = buf
	if err := e.st.copyBlock(e.copy, buf, u.host, u.bytes, "unit "+u.name); err != nil {
		return err
	}
	u.dropHostViews()
	u.host.Free()
	u.dropPacked()
	u.host, u.hostRate = nil, 0
	return e.bindTo(u, buf)
}
