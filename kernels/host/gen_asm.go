//go:build ignore

// gen_asm writes asm_amd64.s: the SIMD micro-kernels of package host for
// AVX2+FMA+F16C (8 lanes, Y registers) and AVX-512F (16 lanes, Z
// registers), one pair of GEMV tiles per weight dtype, the read-bandwidth
// sum and axpy. Run it with go generate.
package main

import (
	"fmt"
	"os"
	"strings"
)

type isa struct {
	name string // function suffix
	reg  string // vector register prefix: Y or Z
	lane int    // float32 lanes
}

type dtype struct {
	name  string // function infix
	gotyp string // element pointer type in the Go declaration
	size  int    // bytes per element
}

var isas = []isa{{"AVX2", "Y", 8}, {"AVX512", "Z", 16}}

var dtypes = []dtype{
	{"BF16", "*uint16", 2},
	{"F16", "*uint16", 2},
	{"F32", "*float32", 4},
	{"FP8", "*uint8", 1},
}

var b strings.Builder

func p(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }

// half is the register that holds lane 16-bit values: X for AVX2's 8
// lanes, Y for AVX-512's 16.
func half(s isa) string {
	if s.lane == 8 {
		return "X"
	}
	return "Y"
}

// widen emits the instructions that load one vector of weights at mem into
// register V<r> as float32 (FP8 E4M3 as its binary16 pattern, i.e. the
// value / 256; the Go side folds 256 into the scales).
func widen(s isa, d dtype, mem string, r int) {
	v := fmt.Sprintf("%s%d", s.reg, r)
	h := fmt.Sprintf("%s%d", half(s), r)
	switch d.name {
	case "BF16":
		p("\tVPMOVZXWD %s, %s", mem, v)
		p("\tVPSLLD $16, %s, %s", v, v)
	case "F16":
		p("\tVCVTPH2PS %s, %s", mem, v)
	case "F32":
		p("\tVMOVUPS %s, %s", mem, v)
	case "FP8":
		// sign-extended byte << 7 puts sign at bit 15 and e,m at bits 13..7
		// (bit 14, the sign's copy, is cleared by the mask in X15/Y15).
		p("\tVPMOVSXBW %s, %s", mem, h)
		p("\tVPSLLW $7, %s, %s", h, h)
		p("\tVPAND %s15, %s, %s", half(s), h, h)
		p("\tVCVTPH2PS %s, %s", h, v)
	}
}

func fp8Mask(s isa, d dtype) {
	if d.name == "FP8" {
		p("\tVPBROADCASTD fp8mask<>(SB), %s15", half(s))
	}
}

// reduce4 sums the lanes of Va..Va+3 into Xa = [Σ Va, …, Σ Va+3], using
// V8..V11 as temporaries.
func reduce4(s isa, a int) {
	if s.lane == 16 {
		for i := range 4 {
			p("\tVEXTRACTF64X4 $1, Z%d, Y%d", a+i, 8+i)
			p("\tVADDPS Y%d, Y%d, Y%d", 8+i, a+i, a+i)
		}
	}
	for i := range 4 {
		p("\tVEXTRACTF128 $1, Y%d, X%d", a+i, 8+i)
		p("\tVADDPS X%d, X%d, X%d", 8+i, a+i, a+i)
	}
	p("\tVHADDPS X%d, X%d, X%d", a+1, a, a)
	p("\tVHADDPS X%d, X%d, X%d", a+3, a+2, a+2)
	p("\tVHADDPS X%d, X%d, X%d", a+2, a, a)
}

func zero(s isa, n int) {
	for i := range n {
		p("\tVXORPS %s%d, %s%d, %s%d", s.reg, i, s.reg, i, s.reg, i)
	}
}

// rows4 is the 4-rows × 1-token tile. With pf (dotR4PF…, for the A/B of
// FT_HOST_PREFETCH) it takes an extra argument and prefetches each row pf
// bytes ahead of the loads: with four rows per core and every core
// streaming, the hardware prefetcher may keep too few lines in flight. The
// arithmetic is the same (the same bits).
func rows4(s isa, d dtype, pf bool) {
	name, args, frame := fmt.Sprintf("dotR4%s%s", d.name, s.name), "", 40
	if pf {
		name, args, frame = fmt.Sprintf("dotR4PF%s%s", d.name, s.name), ", pf uintptr", 48
	}
	p("// func %s(w %s, ld uintptr, x *float32, n int, out *[4]float32%s)", name, d.gotyp, args)
	p("TEXT ·%s(SB), NOSPLIT, $0-%d", name, frame)
	p("\tMOVQ w+0(FP), SI")
	p("\tMOVQ ld+8(FP), DX")
	p("\tMOVQ x+16(FP), DI")
	p("\tMOVQ n+24(FP), CX")
	p("\tMOVQ out+32(FP), R8")
	if pf {
		p("\tMOVQ pf+40(FP), R12")
	}
	p("\tLEAQ (SI)(DX*1), R9")
	p("\tLEAQ (R9)(DX*1), R10")
	p("\tLEAQ (R10)(DX*1), R11")
	fp8Mask(s, d)
	zero(s, 4)
	p("\tTESTQ CX, CX")
	p("\tJZ %sdone", name)
	p("%sloop:", name)
	if pf {
		for _, r := range []string{"SI", "R9", "R10", "R11"} {
			p("\tPREFETCHT0 (%s)(R12*1)", r)
		}
	}
	p("\tVMOVUPS (DI), %s4", s.reg)
	for i, r := range []string{"SI", "R9", "R10", "R11"} {
		widen(s, d, "("+r+")", 8+i)
		p("\tVFMADD231PS %s%d, %s4, %s%d", s.reg, 8+i, s.reg, s.reg, i)
	}
	p("\tADDQ $%d, DI", 4*s.lane)
	for _, r := range []string{"SI", "R9", "R10", "R11"} {
		p("\tADDQ $%d, %s", d.size*s.lane, r)
	}
	p("\tDECQ CX")
	p("\tJNZ %sloop", name)
	p("%sdone:", name)
	reduce4(s, 0)
	p("\tVMOVUPS X0, (R8)")
	p("\tVZEROUPPER")
	p("\tRET")
	p("")
}

// tokens4 is the 1-row × 4-tokens tile.
func tokens4(s isa, d dtype) {
	name := fmt.Sprintf("dotT4%s%s", d.name, s.name)
	p("// func %s(w %s, x0, x1, x2, x3 *float32, n int, out *[4]float32)", name, d.gotyp)
	p("TEXT ·%s(SB), NOSPLIT, $0-56", name)
	p("\tMOVQ w+0(FP), SI")
	p("\tMOVQ x0+8(FP), DI")
	p("\tMOVQ x1+16(FP), R9")
	p("\tMOVQ x2+24(FP), R10")
	p("\tMOVQ x3+32(FP), R11")
	p("\tMOVQ n+40(FP), CX")
	p("\tMOVQ out+48(FP), R8")
	fp8Mask(s, d)
	zero(s, 4)
	p("\tTESTQ CX, CX")
	p("\tJZ %sdone", name)
	p("%sloop:", name)
	widen(s, d, "(SI)", 8)
	for i, r := range []string{"DI", "R9", "R10", "R11"} {
		p("\tVFMADD231PS (%s), %s8, %s%d", r, s.reg, s.reg, i)
	}
	p("\tADDQ $%d, SI", d.size*s.lane)
	for _, r := range []string{"DI", "R9", "R10", "R11"} {
		p("\tADDQ $%d, %s", 4*s.lane, r)
	}
	p("\tDECQ CX")
	p("\tJNZ %sloop", name)
	p("%sdone:", name)
	reduce4(s, 0)
	p("\tVMOVUPS X0, (R8)")
	p("\tVZEROUPPER")
	p("\tRET")
	p("")
}

// rows2tokens4 is the 2-rows × 4-tokens tile: out[4r+t] = row r · x_t.
func rows2tokens4(s isa, d dtype) {
	name := fmt.Sprintf("dotR2T4%s%s", d.name, s.name)
	p("// func %s(w %s, ld uintptr, x0, x1, x2, x3 *float32, n int, out *[8]float32)", name, d.gotyp)
	p("TEXT ·%s(SB), NOSPLIT, $0-64", name)
	p("\tMOVQ w+0(FP), SI")
	p("\tMOVQ ld+8(FP), DX")
	p("\tMOVQ x0+16(FP), DI")
	p("\tMOVQ x1+24(FP), R9")
	p("\tMOVQ x2+32(FP), R10")
	p("\tMOVQ x3+40(FP), R11")
	p("\tMOVQ n+48(FP), CX")
	p("\tMOVQ out+56(FP), R8")
	p("\tLEAQ (SI)(DX*1), R12")
	fp8Mask(s, d)
	zero(s, 8)
	p("\tTESTQ CX, CX")
	p("\tJZ %sdone", name)
	p("%sloop:", name)
	widen(s, d, "(SI)", 8)
	widen(s, d, "(R12)", 9)
	for i, r := range []string{"DI", "R9", "R10", "R11"} {
		p("\tVMOVUPS (%s), %s%d", r, s.reg, 10+i)
		p("\tVFMADD231PS %s%d, %s8, %s%d", s.reg, 10+i, s.reg, s.reg, i)
		p("\tVFMADD231PS %s%d, %s9, %s%d", s.reg, 10+i, s.reg, s.reg, 4+i)
	}
	p("\tADDQ $%d, SI", d.size*s.lane)
	p("\tADDQ $%d, R12", d.size*s.lane)
	for _, r := range []string{"DI", "R9", "R10", "R11"} {
		p("\tADDQ $%d, %s", 4*s.lane, r)
	}
	p("\tDECQ CX")
	p("\tJNZ %sloop", name)
	p("%sdone:", name)
	reduce4(s, 0)
	p("\tVMOVUPS X0, (R8)")
	reduce4(s, 4)
	p("\tVMOVUPS X4, 16(R8)")
	p("\tVZEROUPPER")
	p("\tRET")
	p("")
}

// sum is the read kernel: Σ p[i] over n blocks of 4 vectors.
func sum(s isa) {
	name := "sum" + s.name
	p("// func %s(p *float32, n int) float32", name)
	p("TEXT ·%s(SB), NOSPLIT, $0-20", name)
	p("\tMOVQ p+0(FP), SI")
	p("\tMOVQ n+8(FP), CX")
	zero(s, 4)
	p("\tTESTQ CX, CX")
	p("\tJZ %sdone", name)
	p("%sloop:", name)
	for i := range 4 {
		p("\tVADDPS %d(SI), %s%d, %s%d", i*4*s.lane, s.reg, i, s.reg, i)
	}
	p("\tADDQ $%d, SI", 16*s.lane)
	p("\tDECQ CX")
	p("\tJNZ %sloop", name)
	p("%sdone:", name)
	reduce4(s, 0)
	p("\tVHADDPS X0, X0, X0")
	p("\tVHADDPS X0, X0, X0")
	p("\tVMOVSS X0, ret+16(FP)")
	p("\tVZEROUPPER")
	p("\tRET")
	p("")
}

// axpy is y[i] += a·x[i] over n vectors.
func axpy(s isa) {
	name := "axpy" + s.name
	p("// func %s(y, x *float32, a float32, n int)", name)
	p("TEXT ·%s(SB), NOSPLIT, $0-32", name)
	p("\tMOVQ y+0(FP), DI")
	p("\tMOVQ x+8(FP), SI")
	p("\tVBROADCASTSS a+16(FP), %s15", s.reg)
	p("\tMOVQ n+24(FP), CX")
	p("\tTESTQ CX, CX")
	p("\tJZ %sdone", name)
	p("%sloop:", name)
	p("\tVMOVUPS (DI), %s0", s.reg)
	p("\tVFMADD231PS (SI), %s15, %s0", s.reg, s.reg)
	p("\tVMOVUPS %s0, (DI)", s.reg)
	p("\tADDQ $%d, DI", 4*s.lane)
	p("\tADDQ $%d, SI", 4*s.lane)
	p("\tDECQ CX")
	p("\tJNZ %sloop", name)
	p("%sdone:", name)
	p("\tVZEROUPPER")
	p("\tRET")
	p("")
}

// wsum4 is the weighted row sum of attention's second product for four
// query heads sharing one KV head: o_h[0:C] += Σ_{i<m} a_h[i]·v_i[0:C],
// v_i = v + i·ld bytes, a_h = a + h·as bytes, over C = cb·L columns (cb =
// 4 vectors at AVX-512, 2 at AVX2, so the 4·cb accumulators, cb row
// vectors and four broadcasts fit the registers). The outputs stay in
// registers over all m rows and each row is loaded once for the four
// heads; each column's sum runs over i in order with one FMA a step, as
// axpy's do (the same bits as m axpy calls).
func wsum4(s isa) {
	cb := 4
	if s.lane == 8 {
		cb = 2
	}
	name := "wsum4" + s.name
	p("// func %s(o0, o1, o2, o3 *float32, a *float32, as uintptr, v *float32, ld uintptr, m int)", name)
	p("TEXT ·%s(SB), NOSPLIT, $0-72", name)
	for h, r := range []string{"R8", "R9", "R10", "R11"} {
		p("\tMOVQ o%d+%d(FP), %s", h, 8*h, r)
	}
	p("\tMOVQ a+32(FP), BX")
	p("\tMOVQ as+40(FP), DX")
	p("\tMOVQ v+48(FP), SI")
	p("\tMOVQ ld+56(FP), DI")
	p("\tMOVQ m+64(FP), CX")
	p("\tLEAQ (BX)(DX*2), R12")
	acc := func(h, c int) string { return fmt.Sprintf("%s%d", s.reg, h*cb+c) }
	vr := func(c int) string { return fmt.Sprintf("%s%d", s.reg, 4*cb+c) }
	br := func(h int) string { return fmt.Sprintf("%s%d", s.reg, 5*cb+h) }
	outs := []string{"R8", "R9", "R10", "R11"}
	for h := range 4 {
		for c := range cb {
			p("\tVMOVUPS %d(%s), %s", 4*s.lane*c, outs[h], acc(h, c))
		}
	}
	p("\tTESTQ CX, CX")
	p("\tJZ %sdone", name)
	p("%sloop:", name)
	for c := range cb {
		p("\tVMOVUPS %d(SI), %s", 4*s.lane*c, vr(c))
	}
	p("\tVBROADCASTSS (BX), %s", br(0))
	p("\tVBROADCASTSS (BX)(DX*1), %s", br(1))
	p("\tVBROADCASTSS (R12), %s", br(2))
	p("\tVBROADCASTSS (R12)(DX*1), %s", br(3))
	for h := range 4 {
		for c := range cb {
			p("\tVFMADD231PS %s, %s, %s", vr(c), br(h), acc(h, c))
		}
	}
	p("\tADDQ DI, SI")
	p("\tADDQ $4, BX")
	p("\tADDQ $4, R12")
	p("\tDECQ CX")
	p("\tJNZ %sloop", name)
	p("%sdone:", name)
	for h := range 4 {
		for c := range cb {
			p("\tVMOVUPS %s, %d(%s)", acc(h, c), 4*s.lane*c, outs[h])
		}
	}
	p("\tVZEROUPPER")
	p("\tRET")
	p("")
}

func main() {
	p("// Code generated by gen_asm.go; DO NOT EDIT.")
	p("")
	p("//go:build amd64")
	p("")
	p("#include \"textflag.h\"")
	p("")
	p("// fp8mask clears bit 14 of each binary16 lane (see widen in gen_asm.go).")
	p("DATA fp8mask<>+0(SB)/4, $0xbfffbfff")
	p("GLOBL fp8mask<>(SB), RODATA|NOPTR, $4")
	p("")
	for _, s := range isas {
		for _, d := range dtypes {
			rows4(s, d, false)
			tokens4(s, d)
			rows2tokens4(s, d)
		}
		rows4(s, dtypes[0], true) // BF16
		sum(s)
		axpy(s)
		wsum4(s)
	}
	if err := os.WriteFile("asm_amd64.s", []byte(b.String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
