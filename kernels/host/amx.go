package host

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"unsafe"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/runtime"
)

// The AMX path: products of many tokens with a BF16 weight on the tiles
// of Intel's Advanced Matrix Extensions (Sapphire Rapids and later), which
// multiply 16×32 by 32×16 bf16 tiles into 16×16 float32 sums, an order of
// magnitude more multiply-adds a cycle than the AVX-512 FMAs. The weight
// is read as it lies (16 rows of 32 columns a tile, the row stride its
// width; an FP8 E4M3 weight with a scale a row is widened exactly to bf16
// a panel at a time, its scales applied to the sums); x is packed once a
// product into bf16 tiles in the pairs layout
// the tiles' second operand wants. A float32 x is not a bf16 one: with
// AMXPasses p, x is the sum of p bf16 parts (x rounded, then the rounding
// of what is left, …), each multiplied in its own pass, so that 3 passes
// carry 24 bits of x's mantissa (float32's) and 1 pass is a GPU's bf16
// product. The tiles accumulate in float32, in k order.

// DefaultAMXPasses is the passes a product takes when neither
// Options.AMXPasses nor FT_HOST_AMX says: x as its bf16 rounding plus the
// rounding of the remainder, within 2⁻¹⁸ of x, which keeps the products
// within the package's tolerance of the reference (1 pass does not).
const DefaultAMXPasses = 2

// amxMinTokens is the least tokens a product takes the tiles for: a tile
// holds 16, and fewer read the weight once in the SIMD tiles at no loss.
const amxMinTokens = 16

const (
	// amxKSteps is the k steps (of 32 columns) one sweep of a chunk's
	// weight rows covers: 4 KiB of each row, x's part of it (amxTBlocks
	// token blocks × passes × 64 KiB) staying in L2 while every row pair
	// of the chunk uses it (8 and 16 steps measured slower).
	amxKSteps = 64
	// amxTBlocks is the token blocks (of 16) a sweep covers: a weight is
	// read from memory once per 128 tokens.
	amxTBlocks = 8
	// amxMaxPairs is the most 32-row pairs one pool chunk of a product
	// covers.
	amxMaxPairs = 32
	// amxSlab is the most tokens one packing covers (a longer product runs
	// in slabs): x packed is then at most 256·K·6 bytes.
	amxSlab = 256
)

// amxCfg is the tile configuration: palette 1, tiles 0–7 of 16 rows × 64
// bytes (c00 c01 c10 c11, two weight tiles, two x tiles).
var amxCfg = func() (c [64]byte) {
	c[0] = 1
	for t := range 8 {
		c[16+2*t] = 64
		c[48+t] = 16
	}
	return
}()

// amxPasses reads Options.AMXPasses and FT_HOST_AMX into the passes an
// Engine uses (0: the tiles are off).
func amxPasses(opt int) (int, error) {
	n := opt
	switch {
	case opt > 3:
		return 0, fmt.Errorf("host: %d AMX passes: want 1, 2 or 3 (negative: off)", opt)
	case opt < 0:
		n = 0
	case opt == 0:
		switch v := os.Getenv("FT_HOST_AMX"); v {
		case "":
			n = DefaultAMXPasses
		case "off", "0":
			n = 0
		default:
			p, err := strconv.Atoi(v)
			if err != nil || p < 1 || p > 3 {
				return 0, fmt.Errorf("host: FT_HOST_AMX=%q: want 1, 2 or 3 (passes over x's bf16 parts) or off", v)
			}
			n = p
		}
	}
	if !hasAMX() {
		return 0, nil
	}
	return n, nil
}

// AMXPasses is the passes the Engine's AMX products take (0: it does not
// use the tiles: the CPU lacks them, the OS refused them, or they are off).
func (e *Engine) AMXPasses() int { return e.amx }

// bf16Round is v rounded to the nearest bf16 (ties to even); NaN stays a
// quiet NaN.
func bf16Round(v float32) uint16 {
	b := math.Float32bits(v)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// amxJob is one AMX product: x packed, the weights' 32-row pairs as one
// index range over the segments (segment i's pairs from starts[i]).
type amxJob struct {
	e      *Engine
	x      []float32
	px     []uint16 // x packed (pack)
	T, K   int
	P      int // passes
	ntb    int // token blocks of 16
	ks     int // k steps of 32
	segs   []segment
	up     *weight // gate·up: segs[0] is the gate, its outputs silu(g)·u
	starts []int
}

// tile is the offset in px of the tile of token block tb, k step s, pass p.
func (j *amxJob) tile(tb, s, p int) int { return ((tb*j.ks+s)*j.P + p) * 512 }

// pack writes units [lo,hi) (a unit: token block u/ks, k step u%ks) of px:
// in the tile of (tb, s, p), the value of token 16tb+t at column 32s+2i+e
// lies at i·32 + t·2 + e, part p of it (zero past T). An AMX job runs only
// where hasAMX holds, and AVX-512 F and BW come with it.
func (j *amxJob) pack(_, lo, hi int) {
	var scratch [256]uint32
	for u := lo; u < hi; u++ {
		tb, s := u/j.ks, u%j.ks
		amxPackAVX512(&j.px[j.tile(tb, s, 0)], &j.x[(16*tb)*j.K+32*s], uintptr(4*j.K), min(16, j.T-16*tb), j.P, &scratch)
	}
}

// packGo is pack in Go (little-endian), used only as the reference
// TestAMXPackAVX512 holds amxPackAVX512 to.
func (j *amxJob) packGo(_, lo, hi int) {
	K, P := j.K, j.P
	var parts [3][]uint32 // a tile as 256 pairs: pair (i, t) at i·16 + t
	for u := lo; u < hi; u++ {
		tb, s := u/j.ks, u%j.ks
		for p := range P {
			at := j.tile(tb, s, p)
			parts[p] = unsafe.Slice((*uint32)(unsafe.Pointer(&j.px[at])), 256)
		}
		nt := min(16, j.T-16*tb)
		for t := range nt {
			xr := j.x[(16*tb+t)*K+32*s:][:32]
			for i := range 16 {
				v0, v1 := xr[2*i], xr[2*i+1]
				h0, h1 := bf16Round(v0), bf16Round(v1)
				parts[0][i*16+t] = uint32(h0) | uint32(h1)<<16
				for p := 1; p < P; p++ {
					v0 -= math.Float32frombits(uint32(h0) << 16)
					v1 -= math.Float32frombits(uint32(h1) << 16)
					h0, h1 = bf16Round(v0), bf16Round(v1)
					parts[p][i*16+t] = uint32(h0) | uint32(h1)<<16
				}
			}
		}
		for t := nt; t < 16; t++ {
			for p := range P {
				for i := range 16 {
					parts[p][i*16+t] = 0
				}
			}
		}
	}
}

// run computes the pairs [lo,hi): for each sweep of amxTBlocks token
// blocks and amxKSteps k steps, every pair of the range against those
// tokens (the x tiles stay in L2), the sums kept in the worker's scratch
// between k sweeps and written out after the last.
func (j *amxJob) run(worker, lo, hi int) {
	for i := range j.segs {
		a, b := max(lo, j.starts[i]), min(hi, j.starts[i+1])
		if a < b {
			j.pairs(worker, &j.segs[i], a-j.starts[i], b-j.starts[i])
		}
	}
}

// pairs computes the pairs [a,b) of segment s.
func (j *amxJob) pairs(worker int, s *segment, a, b int) {
	K := j.K
	ldw := uintptr(2 * K)
	tbStride := uintptr(j.ks * j.P * 1024) // bytes from a token block's tile to the next's
	np := b - a
	nw := 1
	if j.up != nil {
		nw = 2
	}
	for tb0 := 0; tb0 < j.ntb; tb0 += amxTBlocks {
		tb1 := min(j.ntb, tb0+amxTBlocks)
		ntp := (tb1 - tb0 + 1) / 2
		c := j.e.pool.Scratch(worker, nw*np*ntp*1024)
		for s0 := 0; s0 < j.ks; s0 += amxKSteps {
			s1 := min(j.ks, s0+amxKSteps)
			load := 0
			if s0 > 0 {
				load = 1
			}
			x := &j.px[j.tile(tb0, s0, 0)]
			for pi := range np {
				row := 32 * (a + pi)
				at := pi * ntp * 1024
				w, ld := j.panel(worker, &s.w, row, s0, s1)
				amxPanel(&amxCfg, w, ld, x, tbStride, tb1-tb0, j.P, s1-s0, &c[at], load)
				if j.up != nil {
					at += np * ntp * 1024
					amxPanel(&amxCfg, &j.up.half[row*K+32*s0], ldw, x, tbStride, tb1-tb0, j.P, s1-s0, &c[at], load)
				}
			}
		}
		for pi := range np {
			for tp := range ntp {
				tbA := tb0 + 2*tp
				at := (pi*ntp + tp) * 1024
				for q := range 4 {
					tb := tbA + q&1
					if tb >= tb1 {
						continue
					}
					tok0 := 16 * tb
					nt := min(16, j.T-tok0)
					row0 := 32*(a+pi) + 16*(q>>1)
					ct := c[at+q*256 : at+q*256+256]
					if j.up != nil {
						// g and u as [token][row], then silu(g)·u.
						var gu [2][256]float32
						cu := c[at+np*ntp*1024+q*256 : at+np*ntp*1024+q*256+256]
						amxTranspose(&gu[0][0], 64, &ct[0], nt, 0, nil)
						amxTranspose(&gu[1][0], 64, &cu[0], nt, 0, nil)
						for t := range nt {
							o := s.out[(tok0+t)*s.ldo+row0 : (tok0+t)*s.ldo+row0+16]
							siluMul(o, gu[0][16*t:16*t+16], gu[1][16*t:16*t+16])
						}
						continue
					}
					_ = s.out[(tok0+nt-1)*s.ldo+row0+15] // the rows amxTranspose writes
					acc := 0
					if s.acc {
						acc = 1
					}
					var scale *float32 // FP8: each row's scale
					if s.w.dt == runtime.F8E4M3 {
						scale = &s.w.scale[row0 : row0+16][0]
					}
					amxTranspose(&s.out[tok0*s.ldo+row0], uintptr(4*s.ldo), &ct[0], nt, acc, scale)
				}
			}
		}
	}
}

// panel is the tile kernel's view of rows [row, row+32) and k steps
// [s0, s1) of w: a BF16 weight in place (its row stride), an FP8 one
// widened exactly to bf16 in the worker's buffer (its scales applied to the
// sums).
func (j *amxJob) panel(worker int, w *weight, row, s0, s1 int) (*uint16, uintptr) {
	K := j.K
	if w.dt != runtime.F8E4M3 {
		return &w.half[row*K+32*s0], uintptr(2 * K)
	}
	nk := 32 * (s1 - s0)
	buf := &j.e.amxA[worker]
	if cap(*buf) < 32*nk {
		*buf = make([]uint16, 32*nk)
	}
	b := (*buf)[:32*nk]
	for r := range 32 {
		q := w.q[(row+r)*K+32*s0 : (row+r)*K+32*s1]
		fp8ToBF16AVX512(&b[r*nk], &q[0], nk/32)
	}
	return &b[0], uintptr(2 * nk)
}

// amxUsable reports whether the product of T tokens with segs' weights
// goes to the tiles: all of the same width, a multiple of 32, each BF16 or
// FP8 E4M3 with a scale a row.
func (e *Engine) amxUsable(T int, segs []segment) bool {
	if e.amx == 0 || T < amxMinTokens || len(segs) == 0 {
		return false
	}
	K := segs[0].w.cols
	if K == 0 || K%32 != 0 {
		return false
	}
	for i := range segs {
		w := &segs[i].w
		if w.cols != K || !(w.dt == runtime.BF16 || w.dt == runtime.F8E4M3 && w.block == 0) {
			return false
		}
	}
	return true
}

// amxMulti runs multi's product on the tiles when amxUsable says so (and
// reports whether it did): the 32-row pairs of every segment there, the
// rows past the last pair in the SIMD tiles. up non-nil makes it the
// gate·up product of GateUpSiLU (segs is then the gate alone, rows a
// multiple of 32).
func (e *Engine) amxMulti(x []float32, T int, segs []segment, up *weight) bool {
	if !e.amxUsable(T, segs) {
		return false
	}
	if up != nil && (len(segs) != 1 || up.dt != runtime.BF16 || up.cols != segs[0].w.cols || up.rows != segs[0].w.rows || up.rows%32 != 0) {
		return false
	}
	e.amxMu.Lock()
	defer e.amxMu.Unlock()
	if T <= amxSlab {
		e.amxSlab(x, T, segs, up)
		return true
	}
	K := segs[0].w.cols
	slab := make([]segment, len(segs))
	for t0 := 0; t0 < T; t0 += amxSlab {
		ts := min(amxSlab, T-t0)
		for i, s := range segs {
			s.out = s.out[t0*s.ldo:]
			slab[i] = s
		}
		e.amxSlab(x[t0*K:(t0+ts)*K], ts, slab, up)
	}
	return true
}

// amxSlab is amxMulti for at most amxSlab tokens (e.amxMu held).
func (e *Engine) amxSlab(x []float32, T int, segs []segment, up *weight) {
	K := segs[0].w.cols
	j := &e.amxJob
	*j = amxJob{e: e, x: x, T: T, K: K, P: e.amx, ntb: (T + 15) / 16, ks: K / 32, segs: segs, up: up, starts: j.starts[:0]}
	n := j.ntb * 16 * K * j.P
	if cap(e.amxBuf) < n {
		e.amxBuf = make([]uint16, n)
	}
	j.px = e.amxBuf[:n]
	if len(e.amxA) < e.pool.Threads() {
		e.amxA = make([][]uint16, e.pool.Threads())
	}
	units := j.ntb * j.ks
	e.pool.Run(units, e.pool.Chunk(units, 4, 2), j.pack)

	j.starts = append(j.starts, 0)
	var rest []segment
	for i := range segs {
		s := &segs[i]
		full := s.w.rows / 32 * 32
		j.starts = append(j.starts, j.starts[i]+full/32)
		if full < s.w.rows {
			w := s.w
			if w.dt == runtime.F8E4M3 {
				w.q, w.scale = w.q[full*K:], w.scale[full:]
			} else {
				w.half = w.half[full*K:]
			}
			w.rows -= full
			rest = append(rest, segment{w: w, out: s.out[full:], ldo: s.ldo, acc: s.acc})
		}
	}
	if np := j.starts[len(segs)]; np > 0 {
		// At most amxMaxPairs pairs a chunk: a worker's sums between k
		// sweeps (4 KiB a pair and block pair) stay within 512 KiB.
		e.pool.Run(np, min(e.pool.Chunk(np, 2, 2), amxMaxPairs), j.run)
	}
	if len(rest) > 0 {
		ph := e.multiPhase(x, T, rest)
		e.pool.Run(ph.N, ph.Chunk, ph.Fn)
	}
	*j = amxJob{starts: j.starts[:0]}
}

// amxGateUp is GateUpSiLU's product on the tiles when they apply (and
// reports whether it ran): checked operands, rows a multiple of 32.
func (e *Engine) amxGateUp(out, x []float32, T int, wg, wu kernels.Mat) bool {
	if wg.Rows%32 != 0 || wg.Rows == 0 {
		return false
	}
	g, u := fromMat(wg), fromMat(wu)
	return e.amxMulti(x, T, []segment{{w: g, out: out, ldo: wg.Rows}}, &u)
}
