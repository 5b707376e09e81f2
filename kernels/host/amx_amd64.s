//go:build amd64

#include "textflag.h"

// TRANSPOSE16 transposes the 16×16 dwords in Z0–Z15 (row i in Zi) in
// place: the pairs of rows interleaved by dwords (Z16–Z31), then by
// qwords (back in Z0–Z15: lane L of Z(4j+c) is column 4L+c of rows
// 4j..4j+3), then the 128-bit lanes gathered in two rounds of
// VSHUFF32X4. Clobbers Z16–Z31.
#define TRANSPOSE16 VUNPCKLPS Z1, Z0, Z16; \
	VUNPCKHPS Z1, Z0, Z17; \
	VUNPCKLPS Z3, Z2, Z18; \
	VUNPCKHPS Z3, Z2, Z19; \
	VUNPCKLPS Z5, Z4, Z20; \
	VUNPCKHPS Z5, Z4, Z21; \
	VUNPCKLPS Z7, Z6, Z22; \
	VUNPCKHPS Z7, Z6, Z23; \
	VUNPCKLPS Z9, Z8, Z24; \
	VUNPCKHPS Z9, Z8, Z25; \
	VUNPCKLPS Z11, Z10, Z26; \
	VUNPCKHPS Z11, Z10, Z27; \
	VUNPCKLPS Z13, Z12, Z28; \
	VUNPCKHPS Z13, Z12, Z29; \
	VUNPCKLPS Z15, Z14, Z30; \
	VUNPCKHPS Z15, Z14, Z31; \
	VUNPCKLPD Z18, Z16, Z0; \
	VUNPCKHPD Z18, Z16, Z1; \
	VUNPCKLPD Z19, Z17, Z2; \
	VUNPCKHPD Z19, Z17, Z3; \
	VUNPCKLPD Z22, Z20, Z4; \
	VUNPCKHPD Z22, Z20, Z5; \
	VUNPCKLPD Z23, Z21, Z6; \
	VUNPCKHPD Z23, Z21, Z7; \
	VUNPCKLPD Z26, Z24, Z8; \
	VUNPCKHPD Z26, Z24, Z9; \
	VUNPCKLPD Z27, Z25, Z10; \
	VUNPCKHPD Z27, Z25, Z11; \
	VUNPCKLPD Z30, Z28, Z12; \
	VUNPCKHPD Z30, Z28, Z13; \
	VUNPCKLPD Z31, Z29, Z14; \
	VUNPCKHPD Z31, Z29, Z15; \
	VSHUFF32X4 $0x44, Z4, Z0, Z16; \
	VSHUFF32X4 $0xEE, Z4, Z0, Z17; \
	VSHUFF32X4 $0x44, Z12, Z8, Z18; \
	VSHUFF32X4 $0xEE, Z12, Z8, Z19; \
	VSHUFF32X4 $0x44, Z5, Z1, Z20; \
	VSHUFF32X4 $0xEE, Z5, Z1, Z21; \
	VSHUFF32X4 $0x44, Z13, Z9, Z22; \
	VSHUFF32X4 $0xEE, Z13, Z9, Z23; \
	VSHUFF32X4 $0x44, Z6, Z2, Z24; \
	VSHUFF32X4 $0xEE, Z6, Z2, Z25; \
	VSHUFF32X4 $0x44, Z14, Z10, Z26; \
	VSHUFF32X4 $0xEE, Z14, Z10, Z27; \
	VSHUFF32X4 $0x44, Z7, Z3, Z28; \
	VSHUFF32X4 $0xEE, Z7, Z3, Z29; \
	VSHUFF32X4 $0x44, Z15, Z11, Z30; \
	VSHUFF32X4 $0xEE, Z15, Z11, Z31; \
	VSHUFF32X4 $0x88, Z18, Z16, Z0; \
	VSHUFF32X4 $0xDD, Z18, Z16, Z4; \
	VSHUFF32X4 $0x88, Z19, Z17, Z8; \
	VSHUFF32X4 $0xDD, Z19, Z17, Z12; \
	VSHUFF32X4 $0x88, Z22, Z20, Z1; \
	VSHUFF32X4 $0xDD, Z22, Z20, Z5; \
	VSHUFF32X4 $0x88, Z23, Z21, Z9; \
	VSHUFF32X4 $0xDD, Z23, Z21, Z13; \
	VSHUFF32X4 $0x88, Z26, Z24, Z2; \
	VSHUFF32X4 $0xDD, Z26, Z24, Z6; \
	VSHUFF32X4 $0x88, Z27, Z25, Z10; \
	VSHUFF32X4 $0xDD, Z27, Z25, Z14; \
	VSHUFF32X4 $0x88, Z30, Z28, Z3; \
	VSHUFF32X4 $0xDD, Z30, Z28, Z7; \
	VSHUFF32X4 $0x88, Z31, Z29, Z11; \
	VSHUFF32X4 $0xDD, Z31, Z29, Z15

// The AMX instructions are written as bytes: Go's assembler does not know
// them (amx_amd64.go lists the encodings).

// func amxPanel(cfg *[64]byte, w *uint16, ldw uintptr, x *uint16, tbStride uintptr, ntb, passes, ksteps int, c *float32, load int)
//
// Rows 0–31 of w (row stride ldw bytes) against ntb token blocks of x, k
// steps of 32 columns: for each pair of token blocks (x, x + tbStride; the
// last block alone when ntb is odd), four 16×16 float32 tiles at c + 4
// KiB·pair (row stride 64 bytes): c00 rows 0–15 × the first block's 16
// tokens, c01 rows 0–15 × the second's, c10 and c11 rows 16–31 (a last
// block alone: c00 and c10, c01 and c11 left as they were loaded or
// zeroed; measured 4.9 -> 4.1 ms for Llama-3-8B's down projection at 16
// tokens against computing a copy of the block beside it). Each k step
// loads the two 16-row tiles of w (w + 64·ks) and, for each of the passes,
// one 1 KiB VNNI tile of each block (consecutive tiles: the passes of step
// 0, then of step 1, …), accumulating the products. load ≠ 0 starts the
// sums from c, else from zero. The tile state is released before
// returning. (Prefetching each row 8 k steps ahead in the one-block loop
// measured slower: gate·up at 16 tokens 9.2–9.6 -> 12.0–12.3 ms.)
TEXT ·amxPanel(SB), NOSPLIT, $0-80
	MOVQ cfg+0(FP), AX
	BYTE $0xC4; BYTE $0xE2; BYTE $0x78; BYTE $0x49; BYTE $0x00 // LDTILECFG (AX)
	MOVQ $64, DX
	MOVQ ldw+16(FP), BX
	MOVQ passes+48(FP), R8
	MOVQ tbStride+32(FP), R13
	MOVQ x+24(FP), R11
	MOVQ c+64(FP), R12
	MOVQ ntb+40(FP), R9
	TESTQ R9, R9
	JLE release

tploop:
	MOVQ R11, CX
	MOVQ R11, DI
	CMPQ R9, $1
	JEQ single
	ADDQ R13, DI

single:
	MOVQ R9, ntb+40(FP) // the blocks left, while R9 counts passes
	MOVQ load+72(FP), R10
	TESTQ R10, R10
	JZ zero
	MOVQ R12, SI
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x04; BYTE $0x16 // TILELOADD (SI)(DX*1), TMM0
	ADDQ $1024, SI
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x0C; BYTE $0x16 // TILELOADD (SI)(DX*1), TMM1
	ADDQ $1024, SI
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x14; BYTE $0x16 // TILELOADD (SI)(DX*1), TMM2
	ADDQ $1024, SI
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x1C; BYTE $0x16 // TILELOADD (SI)(DX*1), TMM3
	JMP start

zero:
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xC0 // TILEZERO TMM0
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xC8 // TILEZERO TMM1
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xD0 // TILEZERO TMM2
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xD8 // TILEZERO TMM3

start:
	MOVQ w+8(FP), SI
	MOVQ BX, AX
	SHLQ $4, AX
	ADDQ SI, AX // rows 16–31
	MOVQ ksteps+56(FP), R10
	TESTQ R10, R10
	JZ store
	CMPQ CX, DI
	JEQ kloop1 // one block left: c01 and c11 are not computed

kloop:
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x24; BYTE $0x1E // TILELOADD (SI)(BX*1), TMM4
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x2C; BYTE $0x18 // TILELOADD (AX)(BX*1), TMM5
	MOVQ R8, R9

ploop:
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x34; BYTE $0x11 // TILELOADD (CX)(DX*1), TMM6
	BYTE $0xC4; BYTE $0xE2; BYTE $0x4A; BYTE $0x5C; BYTE $0xC4             // TDPBF16PS TMM0 += TMM4·TMM6
	BYTE $0xC4; BYTE $0xE2; BYTE $0x4A; BYTE $0x5C; BYTE $0xD5             // TDPBF16PS TMM2 += TMM5·TMM6
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x3C; BYTE $0x17 // TILELOADD (DI)(DX*1), TMM7
	BYTE $0xC4; BYTE $0xE2; BYTE $0x42; BYTE $0x5C; BYTE $0xCC             // TDPBF16PS TMM1 += TMM4·TMM7
	BYTE $0xC4; BYTE $0xE2; BYTE $0x42; BYTE $0x5C; BYTE $0xDD             // TDPBF16PS TMM3 += TMM5·TMM7
	ADDQ $1024, CX
	ADDQ $1024, DI
	DECQ R9
	JNZ ploop

	ADDQ $64, SI
	ADDQ $64, AX
	DECQ R10
	JNZ kloop
	JMP store

kloop1:
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x24; BYTE $0x1E // TILELOADD (SI)(BX*1), TMM4
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x2C; BYTE $0x18 // TILELOADD (AX)(BX*1), TMM5
	MOVQ R8, R9

ploop1:
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x34; BYTE $0x11 // TILELOADD (CX)(DX*1), TMM6
	BYTE $0xC4; BYTE $0xE2; BYTE $0x4A; BYTE $0x5C; BYTE $0xC4             // TDPBF16PS TMM0 += TMM4·TMM6
	BYTE $0xC4; BYTE $0xE2; BYTE $0x4A; BYTE $0x5C; BYTE $0xD5             // TDPBF16PS TMM2 += TMM5·TMM6
	ADDQ $1024, CX
	DECQ R9
	JNZ ploop1

	ADDQ $64, SI
	ADDQ $64, AX
	DECQ R10
	JNZ kloop1

store:
	MOVQ R12, SI
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7A; BYTE $0x4B; BYTE $0x04; BYTE $0x16 // TILESTORED TMM0, (SI)(DX*1)
	ADDQ $1024, SI
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7A; BYTE $0x4B; BYTE $0x0C; BYTE $0x16 // TILESTORED TMM1, (SI)(DX*1)
	ADDQ $1024, SI
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7A; BYTE $0x4B; BYTE $0x14; BYTE $0x16 // TILESTORED TMM2, (SI)(DX*1)
	ADDQ $1024, SI
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7A; BYTE $0x4B; BYTE $0x1C; BYTE $0x16 // TILESTORED TMM3, (SI)(DX*1)
	ADDQ $4096, R12
	ADDQ R13, R11
	ADDQ R13, R11
	MOVQ ntb+40(FP), R9
	SUBQ $2, R9
	JG tploop

release:
	BYTE $0xC4; BYTE $0xE2; BYTE $0x78; BYTE $0x49; BYTE $0xC0 // TILERELEASE
	RET

// func amxTranspose(dst *float32, ldo uintptr, src *float32, nt int, acc int, scale *float32)
//
// dst[t·ldo/4 + r] = src[r·16 + t]·scale[r] (acc ≠ 0: +=; scale nil: 1)
// for r < 16, t < nt ≤ 16: a tile of sums [row][token] written to the
// output's token rows. AVX-512: the 16 rows in Z0–Z15, transposed in four
// rounds of 16 shuffles.
TEXT ·amxTranspose(SB), NOSPLIT, $0-48
	MOVQ src+16(FP), SI
	VMOVUPS 0(SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVUPS 128(SI), Z2
	VMOVUPS 192(SI), Z3
	VMOVUPS 256(SI), Z4
	VMOVUPS 320(SI), Z5
	VMOVUPS 384(SI), Z6
	VMOVUPS 448(SI), Z7
	VMOVUPS 512(SI), Z8
	VMOVUPS 576(SI), Z9
	VMOVUPS 640(SI), Z10
	VMOVUPS 704(SI), Z11
	VMOVUPS 768(SI), Z12
	VMOVUPS 832(SI), Z13
	VMOVUPS 896(SI), Z14
	VMOVUPS 960(SI), Z15
	TRANSPOSE16
	MOVQ scale+40(FP), R8
	TESTQ R8, R8
	JZ unscaled
	VMOVUPS (R8), Z16
	VMULPS Z16, Z0, Z0
	VMULPS Z16, Z1, Z1
	VMULPS Z16, Z2, Z2
	VMULPS Z16, Z3, Z3
	VMULPS Z16, Z4, Z4
	VMULPS Z16, Z5, Z5
	VMULPS Z16, Z6, Z6
	VMULPS Z16, Z7, Z7
	VMULPS Z16, Z8, Z8
	VMULPS Z16, Z9, Z9
	VMULPS Z16, Z10, Z10
	VMULPS Z16, Z11, Z11
	VMULPS Z16, Z12, Z12
	VMULPS Z16, Z13, Z13
	VMULPS Z16, Z14, Z14
	VMULPS Z16, Z15, Z15

unscaled:
	MOVQ dst+0(FP), DI
	MOVQ ldo+8(FP), BX
	MOVQ nt+24(FP), CX
	MOVQ acc+32(FP), AX
	TESTQ AX, AX
	JNZ addrows
	CMPQ CX, $0
	JLE done
	VMOVUPS Z0, (DI)
	ADDQ BX, DI
	CMPQ CX, $1
	JLE done
	VMOVUPS Z1, (DI)
	ADDQ BX, DI
	CMPQ CX, $2
	JLE done
	VMOVUPS Z2, (DI)
	ADDQ BX, DI
	CMPQ CX, $3
	JLE done
	VMOVUPS Z3, (DI)
	ADDQ BX, DI
	CMPQ CX, $4
	JLE done
	VMOVUPS Z4, (DI)
	ADDQ BX, DI
	CMPQ CX, $5
	JLE done
	VMOVUPS Z5, (DI)
	ADDQ BX, DI
	CMPQ CX, $6
	JLE done
	VMOVUPS Z6, (DI)
	ADDQ BX, DI
	CMPQ CX, $7
	JLE done
	VMOVUPS Z7, (DI)
	ADDQ BX, DI
	CMPQ CX, $8
	JLE done
	VMOVUPS Z8, (DI)
	ADDQ BX, DI
	CMPQ CX, $9
	JLE done
	VMOVUPS Z9, (DI)
	ADDQ BX, DI
	CMPQ CX, $10
	JLE done
	VMOVUPS Z10, (DI)
	ADDQ BX, DI
	CMPQ CX, $11
	JLE done
	VMOVUPS Z11, (DI)
	ADDQ BX, DI
	CMPQ CX, $12
	JLE done
	VMOVUPS Z12, (DI)
	ADDQ BX, DI
	CMPQ CX, $13
	JLE done
	VMOVUPS Z13, (DI)
	ADDQ BX, DI
	CMPQ CX, $14
	JLE done
	VMOVUPS Z14, (DI)
	ADDQ BX, DI
	CMPQ CX, $15
	JLE done
	VMOVUPS Z15, (DI)
	ADDQ BX, DI
	JMP done

addrows:
	CMPQ CX, $0
	JLE done
	VADDPS (DI), Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ BX, DI
	CMPQ CX, $1
	JLE done
	VADDPS (DI), Z1, Z1
	VMOVUPS Z1, (DI)
	ADDQ BX, DI
	CMPQ CX, $2
	JLE done
	VADDPS (DI), Z2, Z2
	VMOVUPS Z2, (DI)
	ADDQ BX, DI
	CMPQ CX, $3
	JLE done
	VADDPS (DI), Z3, Z3
	VMOVUPS Z3, (DI)
	ADDQ BX, DI
	CMPQ CX, $4
	JLE done
	VADDPS (DI), Z4, Z4
	VMOVUPS Z4, (DI)
	ADDQ BX, DI
	CMPQ CX, $5
	JLE done
	VADDPS (DI), Z5, Z5
	VMOVUPS Z5, (DI)
	ADDQ BX, DI
	CMPQ CX, $6
	JLE done
	VADDPS (DI), Z6, Z6
	VMOVUPS Z6, (DI)
	ADDQ BX, DI
	CMPQ CX, $7
	JLE done
	VADDPS (DI), Z7, Z7
	VMOVUPS Z7, (DI)
	ADDQ BX, DI
	CMPQ CX, $8
	JLE done
	VADDPS (DI), Z8, Z8
	VMOVUPS Z8, (DI)
	ADDQ BX, DI
	CMPQ CX, $9
	JLE done
	VADDPS (DI), Z9, Z9
	VMOVUPS Z9, (DI)
	ADDQ BX, DI
	CMPQ CX, $10
	JLE done
	VADDPS (DI), Z10, Z10
	VMOVUPS Z10, (DI)
	ADDQ BX, DI
	CMPQ CX, $11
	JLE done
	VADDPS (DI), Z11, Z11
	VMOVUPS Z11, (DI)
	ADDQ BX, DI
	CMPQ CX, $12
	JLE done
	VADDPS (DI), Z12, Z12
	VMOVUPS Z12, (DI)
	ADDQ BX, DI
	CMPQ CX, $13
	JLE done
	VADDPS (DI), Z13, Z13
	VMOVUPS Z13, (DI)
	ADDQ BX, DI
	CMPQ CX, $14
	JLE done
	VADDPS (DI), Z14, Z14
	VMOVUPS Z14, (DI)
	ADDQ BX, DI
	CMPQ CX, $15
	JLE done
	VADDPS (DI), Z15, Z15
	VMOVUPS Z15, (DI)
	ADDQ BX, DI

done:
	VZEROUPPER
	RET


// Constants of amxPackAVX512: the rounding's 0x7fff and 1, the high-half
// mask, the quiet-NaN bit, and the word indexes 2w+1 (w < 32) that gather
// the high halves of 32 float32 lanes of two registers as bf16 pairs.
DATA packk<>+0(SB)/4, $0x7fff
DATA packk<>+4(SB)/4, $1
DATA packk<>+8(SB)/4, $0xffff0000
DATA packk<>+12(SB)/4, $0x00400000
DATA packk<>+16(SB)/2, $1
DATA packk<>+18(SB)/2, $3
DATA packk<>+20(SB)/2, $5
DATA packk<>+22(SB)/2, $7
DATA packk<>+24(SB)/2, $9
DATA packk<>+26(SB)/2, $11
DATA packk<>+28(SB)/2, $13
DATA packk<>+30(SB)/2, $15
DATA packk<>+32(SB)/2, $17
DATA packk<>+34(SB)/2, $19
DATA packk<>+36(SB)/2, $21
DATA packk<>+38(SB)/2, $23
DATA packk<>+40(SB)/2, $25
DATA packk<>+42(SB)/2, $27
DATA packk<>+44(SB)/2, $29
DATA packk<>+46(SB)/2, $31
DATA packk<>+48(SB)/2, $33
DATA packk<>+50(SB)/2, $35
DATA packk<>+52(SB)/2, $37
DATA packk<>+54(SB)/2, $39
DATA packk<>+56(SB)/2, $41
DATA packk<>+58(SB)/2, $43
DATA packk<>+60(SB)/2, $45
DATA packk<>+62(SB)/2, $47
DATA packk<>+64(SB)/2, $49
DATA packk<>+66(SB)/2, $51
DATA packk<>+68(SB)/2, $53
DATA packk<>+70(SB)/2, $55
DATA packk<>+72(SB)/2, $57
DATA packk<>+74(SB)/2, $59
DATA packk<>+76(SB)/2, $61
DATA packk<>+78(SB)/2, $63
GLOBL packk<>(SB), RODATA|NOPTR, $80

// BF16ROUND sets out to v rounded to bf16 (ties to even) as float32
// bits, a NaN made quiet as bf16Round does: u = v + 0x7fff + (v>>16 & 1),
// its high half. Uses Z24, K1 and the constants in Z26–Z29.
#define BF16ROUND(v, out) VPSRLD $16, v, Z24; \
	VPANDD Z27, Z24, Z24; \
	VPADDD Z26, Z24, Z24; \
	VPADDD v, Z24, Z24; \
	VPANDD Z28, Z24, out; \
	VCMPPS $3, v, v, K1; \
	VPORD Z29, v, Z24; \
	VPANDD Z28, Z24, K1, out

// func amxPackAVX512(dst *uint16, src *float32, ldx uintptr, nt, passes int, scratch *[256]uint32)
//
// One k step of one token block of amxJob.pack: for each pass p, the tile
// at dst + 1 KiB·p gets, at pair i and token t, part p of src's token t
// (row stride ldx bytes) at columns 2i, 2i+1 (bf16Round's parts: x rounded
// to bf16, then what is left, …; zero for t ≥ nt). Each token's pairs go
// to scratch as a row, the 16 rows then transposed into the tile.
TEXT ·amxPackAVX512(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ scratch+40(FP), DX
	XORQ R8, R8 // pass

ppass:
	VPBROADCASTD packk<>+0(SB), Z26
	VPBROADCASTD packk<>+4(SB), Z27
	VPBROADCASTD packk<>+8(SB), Z28
	VPBROADCASTD packk<>+12(SB), Z29
	VMOVDQU32 packk<>+16(SB), Z30
	VPXORD Z31, Z31, Z31
	MOVQ src+8(FP), SI
	MOVQ DX, BX
	XORQ R9, R9 // token

ptok:
	CMPQ R9, nt+24(FP)
	JGE pzero
	VMOVUPS (SI), Z16
	VMOVUPS 64(SI), Z17
	MOVQ R8, R10
	TESTQ R10, R10
	JZ plast

pchain:
	BF16ROUND(Z16, Z18)
	VSUBPS Z18, Z16, Z16
	BF16ROUND(Z17, Z19)
	VSUBPS Z19, Z17, Z17
	DECQ R10
	JNZ pchain

plast:
	BF16ROUND(Z16, Z18)
	BF16ROUND(Z17, Z19)
	VPERMT2W Z19, Z30, Z18
	VMOVDQU32 Z18, (BX)
	JMP pnext

pzero:
	VMOVDQU32 Z31, (BX)

pnext:
	ADDQ ldx+16(FP), SI
	ADDQ $64, BX
	INCQ R9
	CMPQ R9, $16
	JLT ptok
	VMOVDQU32 0(DX), Z0
	VMOVDQU32 64(DX), Z1
	VMOVDQU32 128(DX), Z2
	VMOVDQU32 192(DX), Z3
	VMOVDQU32 256(DX), Z4
	VMOVDQU32 320(DX), Z5
	VMOVDQU32 384(DX), Z6
	VMOVDQU32 448(DX), Z7
	VMOVDQU32 512(DX), Z8
	VMOVDQU32 576(DX), Z9
	VMOVDQU32 640(DX), Z10
	VMOVDQU32 704(DX), Z11
	VMOVDQU32 768(DX), Z12
	VMOVDQU32 832(DX), Z13
	VMOVDQU32 896(DX), Z14
	VMOVDQU32 960(DX), Z15
	TRANSPOSE16
	VMOVDQU32 Z0, 0(DI)
	VMOVDQU32 Z1, 64(DI)
	VMOVDQU32 Z2, 128(DI)
	VMOVDQU32 Z3, 192(DI)
	VMOVDQU32 Z4, 256(DI)
	VMOVDQU32 Z5, 320(DI)
	VMOVDQU32 Z6, 384(DI)
	VMOVDQU32 Z7, 448(DI)
	VMOVDQU32 Z8, 512(DI)
	VMOVDQU32 Z9, 576(DI)
	VMOVDQU32 Z10, 640(DI)
	VMOVDQU32 Z11, 704(DI)
	VMOVDQU32 Z12, 768(DI)
	VMOVDQU32 Z13, 832(DI)
	VMOVDQU32 Z14, 896(DI)
	VMOVDQU32 Z15, 960(DI)
	ADDQ $1024, DI
	INCQ R8
	CMPQ R8, passes+32(FP)
	JLT ppass
	VZEROUPPER
	RET

// func fp8ToBF16AVX512(dst *uint16, src *uint8, n int)
//
// dst[i] = the bf16 of E4M3 code src[i], for i < 32·n, exactly: a normal
// code s eeee mmm is s·2^(e−7)·(1 + m/8), bf16 bits s<<15 | (e+120)<<7 |
// m<<4; a subnormal (e = 0) m·2⁻⁹ from a table; the NaN codes read as
// ±480, as the SIMD tiles read them.
TEXT ·fp8ToBF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	TESTQ CX, CX
	JLE fdone
	VPBROADCASTW fp8k<>+0(SB), Z20 // 0x7f
	VPBROADCASTW fp8k<>+2(SB), Z21 // 0x3c00
	VPBROADCASTW fp8k<>+4(SB), Z22 // 0x80
	VPBROADCASTW fp8k<>+6(SB), Z23 // 0x78
	VPBROADCASTW fp8k<>+8(SB), Z24 // 7
	VMOVDQU16 fp8k<>+16(SB), Z25    // subnormals m·2⁻⁹, m < 8 (repeated)

floop:
	VPMOVZXBW (SI), Z0
	VPANDD Z20, Z0, Z1
	VPSLLW $4, Z1, Z1
	VPADDW Z21, Z1, Z1  // (e+120)<<7 | m<<4
	VPANDD Z24, Z0, Z2
	VPERMW Z25, Z2, Z2  // the subnormal of m
	VPTESTNMW Z23, Z0, K1
	VMOVDQU16 Z2, K1, Z1
	VPANDD Z22, Z0, Z3
	VPSLLW $8, Z3, Z3
	VPORD Z3, Z1, Z1
	VMOVDQU16 Z1, (DI)
	ADDQ $32, SI
	ADDQ $64, DI
	DECQ CX
	JNZ floop
	VZEROUPPER

fdone:
	RET

// Constants of fp8ToBF16AVX512.
DATA fp8k<>+0(SB)/2, $0x7f
DATA fp8k<>+2(SB)/2, $0x3c00
DATA fp8k<>+4(SB)/2, $0x80
DATA fp8k<>+6(SB)/2, $0x78
DATA fp8k<>+8(SB)/2, $7
DATA fp8k<>+16(SB)/2, $0x0
DATA fp8k<>+18(SB)/2, $0x3b00
DATA fp8k<>+20(SB)/2, $0x3b80
DATA fp8k<>+22(SB)/2, $0x3bc0
DATA fp8k<>+24(SB)/2, $0x3c00
DATA fp8k<>+26(SB)/2, $0x3c20
DATA fp8k<>+28(SB)/2, $0x3c40
DATA fp8k<>+30(SB)/2, $0x3c60
DATA fp8k<>+32(SB)/2, $0x0
DATA fp8k<>+34(SB)/2, $0x3b00
DATA fp8k<>+36(SB)/2, $0x3b80
DATA fp8k<>+38(SB)/2, $0x3bc0
DATA fp8k<>+40(SB)/2, $0x3c00
DATA fp8k<>+42(SB)/2, $0x3c20
DATA fp8k<>+44(SB)/2, $0x3c40
DATA fp8k<>+46(SB)/2, $0x3c60
DATA fp8k<>+48(SB)/2, $0x0
DATA fp8k<>+50(SB)/2, $0x3b00
DATA fp8k<>+52(SB)/2, $0x3b80
DATA fp8k<>+54(SB)/2, $0x3bc0
DATA fp8k<>+56(SB)/2, $0x3c00
DATA fp8k<>+58(SB)/2, $0x3c20
DATA fp8k<>+60(SB)/2, $0x3c40
DATA fp8k<>+62(SB)/2, $0x3c60
DATA fp8k<>+64(SB)/2, $0x0
DATA fp8k<>+66(SB)/2, $0x3b00
DATA fp8k<>+68(SB)/2, $0x3b80
DATA fp8k<>+70(SB)/2, $0x3bc0
DATA fp8k<>+72(SB)/2, $0x3c00
DATA fp8k<>+74(SB)/2, $0x3c20
DATA fp8k<>+76(SB)/2, $0x3c40
DATA fp8k<>+78(SB)/2, $0x3c60
GLOBL fp8k<>(SB), RODATA|NOPTR, $80
