package place

import (
	"fmt"
	"sync"

	"github.com/flextensor-go/flextensor/runtime"
)

// The staging defaults: four host buffers of 64 MiB each.
const (
	DefaultChunkBytes = 64 << 20
	DefaultBuffers    = 4
)

// Piece is one span of device memory to fill: Size bytes at Off of Dst.
// Its content comes either from host memory the device copies from directly
// (From, a packed pinned block) or from Read.
type Piece struct {
	Dst  *runtime.DeviceBuffer
	Off  int64
	Size int64
	// Read fills p with bytes [off, off+len(p)) of the piece's content. It
	// runs on other goroutines, several at once (for different chunks).
	Read func(p []byte, off int64) error
	// From, when set, holds the content at FromOff already in host memory
	// the device copies from: it is copied directly, without staging.
	From    *runtime.HostBuffer
	FromOff int64
	// Name names the piece in errors (a tensor's name, a unit's).
	Name string
}

// Stager uploads pieces through a few host staging buffers: chunks are read
// on several goroutines while earlier chunks are copied to the device, so
// reading and copying overlap. The staging buffers are taken on first use
// (pinned allocations are slow: once per set-up, not per upload) and kept
// until Free. Its methods are for one goroutine at a time.
type Stager struct {
	dev     runtime.Device
	opts    StagerOptions
	buffers []*runtime.HostBuffer
}

// StagerOptions tune a Stager; the zero value takes the defaults.
type StagerOptions struct {
	// ChunkBytes is each staging buffer's size (DefaultChunkBytes if 0).
	ChunkBytes int64
	// Buffers is the number of staging buffers (DefaultBuffers if 0).
	Buffers int
	// HostAlloc takes a staging buffer; nil means the device's AllocHost
	// (pinned memory on a GPU).
	HostAlloc func(n int64, label string) (*runtime.HostBuffer, error)
	// Label names the staging buffers' allocations ("weight upload
	// staging" if empty).
	Label string
	// Placed, when set, is told the bytes of each chunk as its copy is
	// enqueued (progress reporting).
	Placed func(n int64)
}

// NewStager returns a stager onto dev.
func NewStager(dev runtime.Device, o StagerOptions) *Stager {
	if o.ChunkBytes <= 0 {
		o.ChunkBytes = DefaultChunkBytes
	}
	if o.Buffers <= 0 {
		o.Buffers = DefaultBuffers
	}
	if o.Label == "" {
		o.Label = "weight upload staging"
	}
	if o.HostAlloc == nil {
		o.HostAlloc = dev.AllocHost
	}
	return &Stager{dev: dev, opts: o}
}

// staging returns the staging buffers, taking them on first use.
func (s *Stager) staging() ([]*runtime.HostBuffer, error) {
	if s.buffers != nil {
		return s.buffers, nil
	}
	for i := 0; i < s.opts.Buffers; i++ {
		h, err := s.opts.HostAlloc(s.opts.ChunkBytes, s.opts.Label)
		if err != nil {
			s.Free()
			return nil, err
		}
		s.buffers = append(s.buffers, h)
	}
	return s.buffers, nil
}

// Free returns the staging buffers; a later Upload takes new ones.
func (s *Stager) Free() {
	for _, h := range s.buffers {
		h.Free()
	}
	s.buffers = nil
}

// chunk is one staging-buffer-sized part of a piece.
type chunk struct {
	p      *Piece
	off, n int64
}

// Upload fills every piece on stream and returns when the copies are done
// (the stream is synchronized). Stream calls stay on the calling goroutine.
// On an error no read is left running and no copy is in flight.
func (s *Stager) Upload(stream runtime.Stream, pieces []Piece) error {
	var jobs []chunk
	for i := range pieces {
		p := &pieces[i]
		if err := runtime.CheckRange(fmt.Sprintf("upload of %s to %q", p.Name, p.Dst.Label()), p.Off, p.Size, p.Dst.Size()); err != nil {
			return err
		}
		if p.From != nil {
			if err := stream.CopyH2D(p.Dst, p.Off, p.From, p.FromOff, p.Size); err != nil {
				_ = stream.Synchronize()
				return fmt.Errorf("uploading %s: %w", p.Name, err)
			}
			s.placed(p.Size)
			continue
		}
		if p.Read == nil {
			return fmt.Errorf("upload of %s: the piece has neither host memory nor a reader", p.Name)
		}
		for off := int64(0); off < p.Size; off += s.opts.ChunkBytes {
			jobs = append(jobs, chunk{p: p, off: off, n: min(s.opts.ChunkBytes, p.Size-off)})
		}
	}
	if len(jobs) == 0 {
		return stream.Synchronize()
	}
	stage, err := s.staging()
	if err != nil {
		_ = stream.Synchronize()
		return err
	}
	k := min(len(stage), len(jobs))
	readDone := make([]chan error, len(jobs))
	var wg sync.WaitGroup
	startRead := func(i int) {
		ch := make(chan error, 1)
		readDone[i] = ch
		j, h := jobs[i], stage[i%k]
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch <- j.p.Read(h.Bytes()[:j.n], j.off)
		}()
	}
	// drain waits for the reads in flight, so no goroutine writes a staging
	// buffer after it is freed, and for the copies enqueued.
	drain := func() {
		wg.Wait()
		_ = stream.Synchronize()
	}
	for i := 0; i < k; i++ {
		startRead(i)
	}
	for i, j := range jobs {
		if err := <-readDone[i]; err != nil {
			drain()
			return fmt.Errorf("reading %s: %w", j.p.Name, err)
		}
		if err := stream.CopyH2D(j.p.Dst, j.p.Off+j.off, stage[i%k], 0, j.n); err != nil {
			drain()
			return fmt.Errorf("uploading %s: %w", j.p.Name, err)
		}
		ev, err := stream.Record()
		if err != nil {
			drain()
			return err
		}
		s.placed(j.n)
		if i+k < len(jobs) {
			if err := ev.Synchronize(); err != nil { // the buffer is free again
				drain()
				return fmt.Errorf("uploading %s: %w", j.p.Name, err)
			}
			startRead(i + k)
		}
	}
	return stream.Synchronize()
}

func (s *Stager) placed(n int64) {
	if s.opts.Placed != nil {
		s.opts.Placed(n)
	}
}
