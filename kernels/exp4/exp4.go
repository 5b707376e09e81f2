// Package exp4 is a lossless packing of 16-bit words for streaming BF16
// weights in fewer bytes: each word's 8-bit exponent field is sent as a
// 4-bit code into a per-chunk window of 15 exponents, the sign and 7
// mantissa bits as a byte, so a word costs 12 bits instead of 16 (0.75 of
// the bytes over the host-to-device link). Words whose exponent falls
// outside their chunk's window (zeros, outliers; 0.02% of the weights of
// a trained Llama) are escapes: code 15 plus an entry with the exponent.
// Decoding is exact for any input, BF16 or not (other data only escapes
// more).
//
// A packed buffer of n words in chunks of Chunk words:
//
//	header   32 bytes: magic "EXP4", version 1 (u32), words n (u64), escape entries (u64), zeros
//	lo       n bytes:      word i's sign << 7 | mantissa (bits 15 and 6..0)
//	codes    ⌈n/2⌉ bytes:  word i's code in the low nibble of byte i/2 when i is even, the high one when odd
//	base     one byte a chunk: the window's first exponent E0 (codes 0..14 are E0..E0+14)
//	escStart one u32 a chunk, plus one: chunk c's escapes are entries escStart[c] ≤ j < escStart[c+1]
//	escapes  one u32 each: index of the word in its chunk (low 16 bits) | exponent << 16
//
// Each section starts on a 16-byte boundary. Word w decodes as
// (lo & 0x80) << 8 | e << 7 | (lo & 0x7F), e = E0 + code, or the escape's
// exponent for code 15.
package exp4

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
)

// Chunk is the words a chunk holds: each has its own window, and a decoder
// block handles one.
const Chunk = 4096

// Escape is the code of a word whose exponent is outside its chunk's window.
const Escape = 15

const (
	magic   = "EXP4"
	version = 1
	hdrSize = 32
)

// Layout is where the sections of a packed buffer lie (byte offsets from
// its start), read from its header.
type Layout struct {
	Words    int64 // n: 16-bit words packed
	Chunks   int64 // ⌈n / Chunk⌉
	Escapes  int64 // escape entries
	Lo       int64 // offset of the lo bytes
	Codes    int64 // of the codes
	Base     int64 // of the chunks' first exponents
	EscStart int64 // of the escape prefix offsets (Chunks + 1 u32)
	Esc      int64 // of the escape entries
	Size     int64 // total bytes
}

func align16(x int64) int64 { return (x + 15) &^ 15 }

// layoutFor is the layout of n words with esc escapes.
func layoutFor(n, esc int64) Layout {
	l := Layout{Words: n, Chunks: (n + Chunk - 1) / Chunk, Escapes: esc}
	l.Lo = hdrSize
	l.Codes = align16(l.Lo + n)
	l.Base = align16(l.Codes + (n+1)/2)
	l.EscStart = align16(l.Base + l.Chunks)
	l.Esc = align16(l.EscStart + 4*(l.Chunks+1))
	l.Size = align16(l.Esc + 4*esc)
	return l
}

// SizeFor is the packed size of words 16-bit words of which escapes fall
// outside their chunk's window.
func SizeFor(words, escapes int64) int64 { return layoutFor(words, escapes).Size }

// ReadLayout reads and checks a packed buffer's header.
func ReadLayout(p []byte) (Layout, error) {
	if len(p) < hdrSize || string(p[:4]) != magic {
		return Layout{}, errors.New("exp4: not a packed buffer (no EXP4 header)")
	}
	if v := binary.LittleEndian.Uint32(p[4:]); v != version {
		return Layout{}, fmt.Errorf("exp4: version %d, want %d", v, version)
	}
	n, esc := int64(binary.LittleEndian.Uint64(p[8:])), int64(binary.LittleEndian.Uint64(p[16:]))
	if n < 0 || esc < 0 || esc > n {
		return Layout{}, fmt.Errorf("exp4: header says %d words and %d escapes", n, esc)
	}
	l := layoutFor(n, esc)
	if int64(len(p)) < l.Size {
		return Layout{}, fmt.Errorf("exp4: %d bytes, the header's %d words and %d escapes need %d", len(p), n, esc, l.Size)
	}
	return l, nil
}

// chunkPlan is one chunk's window and escape count (the encoder's first pass).
type chunkPlan struct {
	base byte
	esc  int
}

// exponent is the exponent field of the little-endian word of bytes lo, hi.
func exponent(lo, hi byte) byte { return hi<<1 | lo>>7 }

// window picks the 15-exponent window holding most of the words of b
// (little-endian 16-bit words).
func window(b []byte) chunkPlan {
	var hist [256]int
	for i := 0; i+1 < len(b); i += 2 {
		hist[exponent(b[i], b[i+1])]++
	}
	run := 0
	for e := 0; e < 15; e++ {
		run += hist[e]
	}
	best, bestRun := 0, run
	for e := 1; e+15 <= 256; e++ {
		run += hist[e+14] - hist[e-1]
		if run > bestRun {
			best, bestRun = e, run
		}
	}
	return chunkPlan{base: byte(best), esc: len(b)/2 - bestRun}
}

// parallel runs f over chunks [0, n) on the CPUs.
func parallel(n int64, f func(c int64)) {
	workers := int64(min(runtime.GOMAXPROCS(0), 32))
	if n < workers {
		workers = max(n, 1)
	}
	var wg sync.WaitGroup
	for w := int64(0); w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := w; c < n; c += workers {
				f(c)
			}
		}()
	}
	wg.Wait()
}

// Sizing is the first pass over words to pack: each chunk's window and
// escape count, and the packed size they give (Measure). Packing with it
// (PackSized) skips that pass.
type Sizing struct {
	Size  int64 // the packed bytes
	words int64
	plans []chunkPlan
}

// Measure is src's Sizing (src: 16-bit little-endian words).
func Measure(src []byte) (Sizing, error) {
	if len(src)%2 != 0 {
		return Sizing{}, fmt.Errorf("exp4: %d bytes is not a whole number of 16-bit words", len(src))
	}
	plans := plan(src)
	var esc int64
	for _, p := range plans {
		esc += int64(p.esc)
	}
	n := int64(len(src) / 2)
	return Sizing{Size: layoutFor(n, esc).Size, words: n, plans: plans}, nil
}

// PackedSize is the bytes Pack needs for src (a pass over it).
func PackedSize(src []byte) (int64, error) {
	sz, err := Measure(src)
	return sz.Size, err
}

// plan is each chunk's window over src.
func plan(src []byte) []chunkPlan {
	n := int64(len(src) / 2)
	chunks := (n + Chunk - 1) / Chunk
	plans := make([]chunkPlan, chunks)
	parallel(chunks, func(c int64) {
		plans[c] = window(src[2*c*Chunk : 2*min((c+1)*Chunk, n)])
	})
	return plans
}

// Pack writes src (16-bit little-endian words) packed into dst, which must
// hold PackedSize(src) bytes, and returns the bytes written.
func Pack(dst, src []byte) (int64, error) {
	sz, err := Measure(src)
	if err != nil {
		return 0, err
	}
	return PackSized(dst, src, sz)
}

// PackSized is Pack with src's Sizing from Measure (src unchanged since).
func PackSized(dst, src []byte, sz Sizing) (int64, error) {
	if int64(len(src)) != 2*sz.words || len(src)%2 != 0 {
		return 0, fmt.Errorf("exp4: a sizing of %d words for %d bytes", sz.words, len(src))
	}
	plans := sz.plans
	n := int64(len(src) / 2)
	starts := make([]int64, len(plans)+1)
	for c, p := range plans {
		starts[c+1] = starts[c] + int64(p.esc)
	}
	l := layoutFor(n, starts[len(plans)])
	if int64(len(dst)) < l.Size {
		return 0, fmt.Errorf("exp4: %d bytes to pack into, need %d", len(dst), l.Size)
	}
	// Zero what the chunks do not write: the header's tail and the
	// sections' paddings (the chunks clear their own code bytes).
	clear(dst[:l.Lo])
	clear(dst[l.Lo+n : l.Codes])
	clear(dst[l.Codes+(n+1)/2 : l.Base])
	clear(dst[l.Base+l.Chunks : l.EscStart])
	clear(dst[l.EscStart+4*(l.Chunks+1) : l.Esc])
	clear(dst[l.Esc+4*l.Escapes : l.Size])
	copy(dst, magic)
	binary.LittleEndian.PutUint32(dst[4:], version)
	binary.LittleEndian.PutUint64(dst[8:], uint64(n))
	binary.LittleEndian.PutUint64(dst[16:], uint64(l.Escapes))
	for c := range starts {
		binary.LittleEndian.PutUint32(dst[l.EscStart+4*int64(c):], uint32(starts[c]))
	}
	parallel(int64(len(plans)), func(c int64) {
		base := plans[c].base
		dst[l.Base+c] = base
		first, last := c*Chunk, min((c+1)*Chunk, n)
		b := src[2*first : 2*last]
		lo := dst[l.Lo+first : l.Lo+last]
		codes := dst[l.Codes+first/2 : l.Codes+(last+1)/2] // chunks are even-sized: no two chunks share a code byte
		esc := dst[l.Esc+4*starts[c] : l.Esc+4*starts[c+1]]
		b = b[:2*len(lo)]
		clear(codes)
		for k := range lo {
			x0, x1 := b[2*k], b[2*k+1]
			lo[k] = x1&0x80 | x0&0x7F
			e := x1<<1 | x0>>7
			d := e - base
			if e < base || d >= Escape {
				d = Escape
				binary.LittleEndian.PutUint32(esc, uint32(k)|uint32(e)<<16)
				esc = esc[4:]
			}
			codes[k/2] |= d << (4 * (k & 1))
		}
	})
	return l.Size, nil
}

// Unpack decodes the packed buffer p into dst (2 × Words bytes): the
// reference decoder, its chunks spread over the CPUs.
func Unpack(dst, p []byte) error {
	l, err := ReadLayout(p)
	if err != nil {
		return err
	}
	if int64(len(dst)) < 2*l.Words {
		return fmt.Errorf("exp4: %d bytes to unpack into, the buffer holds %d words", len(dst), l.Words)
	}
	errs := make([]error, l.Chunks)
	parallel(l.Chunks, func(c int64) { errs[c] = unpackChunk(dst, p, l, c) })
	return errors.Join(errs...)
}

// unpackChunk decodes chunk c of the packed buffer p (layout l) into dst:
// each word from its lo byte and code, then the chunk's escapes.
func unpackChunk(dst, p []byte, l Layout, c int64) error {
	base := p[l.Base+c]
	lo, hi := c*Chunk, min((c+1)*Chunk, l.Words)
	for i := lo; i < hi; i++ {
		code := p[l.Codes+i/2] >> (4 * (i & 1)) & 0xF
		b := p[l.Lo+i]
		w := uint16(b&0x80)<<8 | uint16(base+code)<<7 | uint16(b&0x7F)
		binary.LittleEndian.PutUint16(dst[2*i:], w)
	}
	e0 := binary.LittleEndian.Uint32(p[l.EscStart+4*c:])
	e1 := binary.LittleEndian.Uint32(p[l.EscStart+4*c+4:])
	if e1 < e0 || int64(e1) > l.Escapes {
		return fmt.Errorf("exp4: chunk %d's escapes %d..%d out of order or past the %d entries", c, e0, e1, l.Escapes)
	}
	for j := int64(e0); j < int64(e1); j++ {
		ent := binary.LittleEndian.Uint32(p[l.Esc+4*j:])
		k := lo + int64(ent&0xFFFF)
		if k >= hi {
			return fmt.Errorf("exp4: escape %d points past chunk %d", j, c)
		}
		b := p[l.Lo+k]
		w := uint16(b&0x80)<<8 | uint16(byte(ent>>16))<<7 | uint16(b&0x7F)
		binary.LittleEndian.PutUint16(dst[2*k:], w)
	}
	return nil
}
