package host

import (
	"fmt"
	"time"
	"unsafe"

	"github.com/flextensor-go/flextensor/runtime/hostmem"
)

// readChunk is the float32 values one pool chunk of ReadSum sums (1 MiB).
const readChunk = 1 << 18

// ReadSum returns Σ buf[i], buf read once by all the Engine's threads in
// 1 MiB chunks: the STREAM-like read kernel whose rate is the host's
// read-bandwidth ceiling for the GEMVs. The float32 sum's order depends on
// the chunking (it is a bandwidth probe, not a reference sum).
func (e *Engine) ReadSum(buf []float32) float32 {
	n := len(buf)
	if n == 0 {
		return 0
	}
	chunks := (n + readChunk - 1) / readChunk
	partial := make([]float32, chunks)
	e.pool.Run(chunks, 1, func(_, lo, hi int) {
		for c := lo; c < hi; c++ {
			partial[c] = e.sum(buf[c*readChunk : min((c+1)*readChunk, n)])
		}
	})
	var s float32
	for _, v := range partial {
		s += v
	}
	return s
}

// sum is Σ v on the calling goroutine.
func (e *Engine) sum(v []float32) float32 {
	var s float32
	i := 0
	if e.k != nil {
		blk := 4 * e.k.lanes
		if nb := len(v) / blk; nb > 0 {
			s = e.k.sum(&v[0], nb)
			i = nb * blk
		}
	} else {
		var a [8]float32
		for ; i+8 <= len(v); i += 8 {
			w := v[i : i+8 : i+8]
			a[0] += w[0]
			a[1] += w[1]
			a[2] += w[2]
			a[3] += w[3]
			a[4] += w[4]
			a[5] += w[5]
			a[6] += w[6]
			a[7] += w[7]
		}
		s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
	}
	for ; i < len(v); i++ {
		s += v[i]
	}
	return s
}

// mapProbe maps MapReadBuffer's buffers (a variable for the tests).
var mapProbe = hostmem.Map

// MapReadBuffer maps a buffer for ReadSum of bytes (rounded down to
// float32s; at least one) and fills it on the Engine's threads with
// nonzero values (i&1023: zero pages could be merged or deduplicated under
// a hypervisor). It is mapped as the offload engine's pinned weight blocks
// are (runtime/hostmem: 2 MiB-aligned, on huge pages where the kernel
// allows; as before under FT_PINNED_HUGE=0, hostmem.PinnedHuge), not as
// 4 KiB pages of the Go heap, over which a host layer's step took 7.2 ms
// against 4.7 ms over huge pages on the H200 machine: the planner rates
// the host units by ReadBandwidth, and they read those blocks. The caller
// frees the block; buf is its memory and dies with it.
func (e *Engine) MapReadBuffer(bytes int64) (blk *hostmem.Block, buf []float32, err error) {
	if bytes < 4 {
		return nil, nil, fmt.Errorf("host: a read buffer of %d bytes: want at least 4", bytes)
	}
	blk, err = mapProbe(bytes/4*4, hostmem.Options{Huge: hostmem.PinnedHuge()})
	if err != nil {
		return nil, nil, fmt.Errorf("host: mapping a read buffer of %d bytes: %w", bytes/4*4, err)
	}
	buf = unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(blk.Bytes()))), bytes/4)
	e.pool.Run(len(buf), readChunk, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			buf[i] = float32(i & 1023)
		}
	})
	return blk, buf, nil
}

// ReadBandwidth measures the host's read bandwidth: it fills a buffer of
// bytes (rounded down to float32s; make it several times the last-level
// cache), reads it once to warm the pages, then times reps ReadSums and
// returns the best rate in GB/s (1e9 bytes per second).
func (e *Engine) ReadBandwidth(bytes int64, reps int) (float64, error) {
	if bytes < 4 || reps < 1 {
		return 0, fmt.Errorf("host.ReadBandwidth: %d bytes, %d repetitions: want at least 4 bytes and one repetition", bytes, reps)
	}
	blk, buf, err := e.MapReadBuffer(bytes)
	if err != nil {
		return 0, fmt.Errorf("host.ReadBandwidth: %w", err)
	}
	defer blk.Free()
	e.ReadSum(buf)
	best := time.Duration(1 << 62)
	for range reps {
		t0 := time.Now()
		e.ReadSum(buf)
		best = min(best, time.Since(t0))
	}
	return float64(len(buf)*4) / best.Seconds() / 1e9, nil
}
