//go:build amd64

#include "textflag.h"

// The constants of the 16-lane expf (float32 bits of ops.go's, as Go
// rounds them).
DATA siluk<>+0(SB)/4, $0x3fb8aa3b  // log2e
DATA siluk<>+4(SB)/4, $0x3f317200  // ln2hi
DATA siluk<>+8(SB)/4, $0x35bfbe8e  // ln2lo
DATA siluk<>+12(SB)/4, $0x3ab60b61 // 1/720
DATA siluk<>+16(SB)/4, $0x3c088889 // 1/120
DATA siluk<>+20(SB)/4, $0x3d2aaaab // 1/24
DATA siluk<>+24(SB)/4, $0x3e2aaaab // 1/6
DATA siluk<>+28(SB)/4, $0x3f000000 // 1/2
DATA siluk<>+32(SB)/4, $0x3f800000 // 1
DATA siluk<>+36(SB)/4, $0x42b00000 // 88
DATA siluk<>+40(SB)/4, $0xc2ae0000 // -87
DATA siluk<>+44(SB)/4, $0x7f800000 // +Inf
DATA siluk<>+48(SB)/4, $127
GLOBL siluk<>(SB), RODATA|NOPTR, $52

// LOADK: the constants into Z16–Z29.
#define LOADK VBROADCASTSS siluk<>+0(SB), Z16; \
	VBROADCASTSS siluk<>+4(SB), Z17; \
	VBROADCASTSS siluk<>+8(SB), Z18; \
	VBROADCASTSS siluk<>+12(SB), Z19; \
	VBROADCASTSS siluk<>+16(SB), Z20; \
	VBROADCASTSS siluk<>+20(SB), Z21; \
	VBROADCASTSS siluk<>+24(SB), Z22; \
	VBROADCASTSS siluk<>+28(SB), Z23; \
	VBROADCASTSS siluk<>+32(SB), Z24; \
	VBROADCASTSS siluk<>+36(SB), Z25; \
	VBROADCASTSS siluk<>+40(SB), Z26; \
	VBROADCASTSS siluk<>+44(SB), Z27; \
	VPBROADCASTD siluk<>+48(SB), Z28; \
	VPXORD Z29, Z29, Z29

// EXPF: Z9 = expf(Z1), ops.go's steps one for one: t = x·log2e; n =
// floor(t) + (t − floor(t) ≥ 1/2), which is floor(t + 1/2) taken exactly;
// r = x − n·ln2hi − n·ln2lo; p by Horner from 1/720; p·2ⁿ; +Inf above 88,
// 0 below −87. The constants in Z16–Z29; clobbers Z2–Z8, K1–K3.
#define EXPF VMULPS Z16, Z1, Z2; \
	VRNDSCALEPS $9, Z2, Z3; \
	VSUBPS Z3, Z2, Z4; \
	VCMPPS $0x1D, Z23, Z4, K1; \
	VADDPS Z24, Z3, K1, Z3; \
	VMULPS Z17, Z3, Z5; \
	VSUBPS Z5, Z1, Z6; \
	VMULPS Z18, Z3, Z5; \
	VSUBPS Z5, Z6, Z6; \
	VMULPS Z19, Z6, Z7; \
	VADDPS Z20, Z7, Z7; \
	VMULPS Z6, Z7, Z7; \
	VADDPS Z21, Z7, Z7; \
	VMULPS Z6, Z7, Z7; \
	VADDPS Z22, Z7, Z7; \
	VMULPS Z6, Z7, Z7; \
	VADDPS Z23, Z7, Z7; \
	VMULPS Z6, Z7, Z7; \
	VADDPS Z24, Z7, Z7; \
	VMULPS Z6, Z7, Z7; \
	VADDPS Z24, Z7, Z7; \
	VCVTTPS2DQ Z3, Z8; \
	VPADDD Z28, Z8, Z8; \
	VPSLLD $23, Z8, Z8; \
	VMULPS Z8, Z7, Z9; \
	VCMPPS $0x1E, Z25, Z1, K2; \
	VMOVAPS Z27, K2, Z9; \
	VCMPPS $0x11, Z26, Z1, K3; \
	VMOVAPS Z29, K3, Z9

// func siluMulAVX512(out, gate, up *float32, n int)
//
// out[i] = g/(1 + expf(−g))·up[i], g = gate[i], for i < 16·n: expf's steps
// (ops.go) one for one, each rounded alone (no fused multiply-adds), so
// the bits are the scalar siluMul's. out may alias gate or up.
TEXT ·siluMulAVX512(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DX
	MOVQ n+24(FP), CX
	TESTQ CX, CX
	JLE sdone
	LOADK

sloop:
	VMOVUPS (SI), Z0
	VSUBPS Z0, Z29, Z1        // x = −g
	EXPF
	VADDPS Z24, Z9, Z10       // 1 + e
	VDIVPS Z10, Z0, Z11       // g / (1 + e)
	VMULPS (DX), Z11, Z11
	VMOVUPS Z11, (DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	DECQ CX
	JNZ sloop
	VZEROUPPER

sdone:
	RET

// func expShiftAVX512(out, in *float32, shift float32, n int, sums *[16]float32)
//
// out[i] = expf(in[i] − shift) for i < 16·n, the bits of ops.go's expf;
// sums[l] = Σ out[16j + l] over j in order.
TEXT ·expShiftAVX512(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ in+8(FP), SI
	MOVQ n+24(FP), CX
	MOVQ sums+32(FP), DX
	VPXORD Z31, Z31, Z31
	TESTQ CX, CX
	JLE edone
	LOADK
	VBROADCASTSS shift+16(FP), Z30

eloop:
	VMOVUPS (SI), Z0
	VSUBPS Z30, Z0, Z1
	EXPF
	VMOVUPS Z9, (DI)
	VADDPS Z9, Z31, Z31
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ eloop

edone:
	VMOVUPS Z31, (DX)
	VZEROUPPER
	RET

// func maxAVX512(p *float32, n int, out *[16]float32)
//
// out[l] = max over j of p[16j + l], j < n (n ≥ 1).
TEXT ·maxAVX512(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ out+16(FP), DX
	VMOVUPS (SI), Z0
	ADDQ $64, SI
	DECQ CX
	JLE mdone

mloop:
	VMAXPS (SI), Z0, Z0
	ADDQ $64, SI
	DECQ CX
	JNZ mloop

mdone:
	VMOVUPS Z0, (DX)
	VZEROUPPER
	RET
