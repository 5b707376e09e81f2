// Package hostmem maps large, long-lived blocks of host memory outside the
// Go heap, on transparent huge pages where the kernel allows: the pinned
// weight blocks of runtime/cuda (which page-locks them afterwards) and
// anything else read at memory bandwidth by the host cores, where 4 KiB
// pages cost TLB misses (a host-computed decoder layer read its weights in
// 7.2 ms from 4 KiB-page Go memory and 4.7 ms from huge pages on the H200
// machine). It also reads back, from /proc/self/smaps, how much of given
// blocks the kernel backs with huge pages.
//
// On Linux a huge block is mapped 2 MiB-aligned and rounded up to whole
// 2 MiB pages (the mapping over-asks by 2 MiB and gives the slack back),
// marked MADV_HUGEPAGE before its first touch, faulted in on several
// goroutines, then MADV_COLLAPSE'd so that whatever the fault path left on
// 4 KiB pages is collapsed synchronously where the kernel can. Elsewhere
// Map falls back to Go memory.
package hostmem

import (
	"fmt"
	"os"
	goruntime "runtime"
	"sync"
	"unsafe"
)

// HugePageSize is the transparent huge page size blocks are aligned to
// (x86-64 and arm64 with 4 KiB base pages).
const HugePageSize = 2 << 20

// PinnedHuge reports whether pinned weight blocks (runtime/cuda's
// AllocHost), and the host read-rate probe standing in for them
// (kernels/host's ReadBandwidth), are mapped as huge blocks (Options.Huge):
// true unless FT_PINNED_HUGE=0, the A/B switch mapping them as before
// (unaligned, MADV_HUGEPAGE only). It reads the environment at each call;
// runtime/cuda reads it once at start-up.
func PinnedHuge() bool { return os.Getenv("FT_PINNED_HUGE") != "0" }

// Options say how Map maps a block.
type Options struct {
	// Huge asks for 2 MiB alignment, MADV_HUGEPAGE before the first touch
	// and MADV_COLLAPSE after it. Without it the block is a plain
	// anonymous mapping (as page-aligned as mmap makes it) with only
	// MADV_HUGEPAGE, the behaviour before huge blocks.
	Huge bool
	// Touchers is the number of goroutines faulting the block in; 0 means
	// GOMAXPROCS.
	Touchers int
}

// Block is memory from Map. Free returns it; Bytes must not be used after.
type Block struct {
	data []byte
	// base and length are the whole mapping Free unmaps (length ≥
	// len(data)); 0 for Go memory.
	base   unsafe.Pointer
	length uintptr
	// Aligned reports whether the block starts on a HugePageSize boundary.
	Aligned bool
	// CollapseErr is MADV_COLLAPSE's error when it failed for another
	// reason than the kernel's lack of it or of free huge pages (nil
	// otherwise, and when it was not tried): worth a trace line.
	CollapseErr error
	once        sync.Once
	freeErr     error
}

// Bytes is the block's memory, exactly as long as asked.
func (b *Block) Bytes() []byte { return b.data }

// MappedLen is the length of the mapping behind the block (a multiple of
// the page size, of HugePageSize for huge blocks); len(Bytes()) for Go
// memory.
func (b *Block) MappedLen() int64 {
	if b.length == 0 {
		return int64(len(b.data))
	}
	return int64(b.length)
}

// Free unmaps the block (once; later calls return the first's result).
func (b *Block) Free() error {
	b.once.Do(func() {
		b.freeErr = b.unmap()
		b.data = nil
	})
	return b.freeErr
}

// Map maps n bytes of zeroed, faulted-in host memory.
func Map(n int64, opt Options) (*Block, error) {
	if n <= 0 {
		return nil, fmt.Errorf("hostmem: mapping %d bytes: want a positive size", n)
	}
	if int64(int(n)) != n || n > 1<<48 {
		return nil, fmt.Errorf("hostmem: mapping %d bytes: too large for this platform", n)
	}
	b, err := mapBlock(n, opt)
	if err != nil {
		return nil, err
	}
	Touch(b.data, opt.Touchers)
	if opt.Huge {
		b.CollapseErr = collapse(b)
	}
	return b, nil
}

// touchPiece is the bytes each toucher goroutine faults in at a time.
const touchPiece = 8 << 20

// Touch writes a zero to the first byte of every 4 KiB page of data (so
// only for memory whose contents do not matter yet) on up to workers
// goroutines (GOMAXPROCS when 0), faulting it in on several cores: a page
// never written reads from the shared zero page, and the kernel zeroes
// each page at its first touch, which on one core runs at a fraction of
// the machine's memory bandwidth. A page fault holds its
// goroutine's P, so more goroutines than GOMAXPROCS add nothing and
// several blocks touched at once share the Ps rather than oversubscribe
// the cores.
func Touch(data []byte, workers int) {
	if workers <= 0 {
		workers = goruntime.GOMAXPROCS(0)
	}
	pieces := (len(data) + touchPiece - 1) / touchPiece
	workers = min(workers, pieces)
	if workers <= 1 {
		touchRange(data)
		return
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	next := 0
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				off := next
				next += touchPiece
				mu.Unlock()
				if off >= len(data) {
					return
				}
				touchRange(data[off:min(off+touchPiece, len(data))])
			}
		}()
	}
	wg.Wait()
}

// touchRange writes a zero to the first byte of each 4 KiB page of d.
func touchRange(d []byte) {
	for i := 0; i < len(d); i += 4096 {
		d[i] = 0
	}
}
