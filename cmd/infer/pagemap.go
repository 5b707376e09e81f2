package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"unsafe"
)

// Guest-physical placement of a chunk map's chunks, from /proc/self/pagemap:
// one 64-bit entry per 4 KiB virtual page, bit 63 "present" and bits 0-54
// the page frame number. The kernel reports frame numbers only to a
// process with CAP_SYS_ADMIN (zeros otherwise), so a chunk's range is
// unknown ("-") without it.

const (
	pagemapPresent = uint64(1) << 63
	pagemapPFNMask = uint64(1)<<55 - 1
)

// pagemapFrame decodes one pagemap entry: the page's physical address, and
// whether it is known (the page present and its frame number shown).
func pagemapFrame(entry uint64) (phys uint64, ok bool) {
	pfn := entry & pagemapPFNMask
	if entry&pagemapPresent == 0 || pfn == 0 {
		return 0, false
	}
	return pfn * 4096, true
}

// physRanger reads physical addresses of this process's pages.
type physRanger struct{ f *os.File }

// openPhysRanger opens /proc/self/pagemap; nil where there is none.
func openPhysRanger() *physRanger {
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return nil
	}
	return &physRanger{f}
}

func (r *physRanger) close() {
	if r != nil {
		r.f.Close()
	}
}

// span is the lowest and highest physical address of the pages of b
// sampled every step bytes (a multiple of 4096), and whether every sample
// was known.
func (r *physRanger) span(b []byte, step int) (lo, hi uint64, ok bool) {
	if r == nil || len(b) == 0 {
		return 0, 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	var e [8]byte
	lo = ^uint64(0)
	for off := 0; off < len(b); off += step {
		page := (base + uintptr(off)) / 4096
		if _, err := r.f.ReadAt(e[:], int64(page)*8); err != nil {
			return 0, 0, false
		}
		p, known := pagemapFrame(binary.LittleEndian.Uint64(e[:]))
		if !known {
			return 0, 0, false
		}
		lo, hi = min(lo, p), max(hi, p)
	}
	return lo, hi, true
}

// physCell is a chunk's physical range in GiB for the table, "-" unknown:
// lo and hi are span's lowest and highest sample of pages sampled every
// step bytes, so the range's top is hi+step (the end of the last sample's
// stretch, as if contiguous).
func physCell(lo, hi uint64, step int, ok bool) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.2f-%.2f", float64(lo)/(1<<30), float64(hi+uint64(step))/(1<<30))
}
