//go:build amd64

#include "textflag.h"

// The AMX instructions are written as bytes: Go's assembler does not know
// them (amx_amd64.go lists the encodings).

// func amxPanel(cfg *[64]byte, w *uint16, ldw uintptr, x *uint16, tbStride uintptr, ntb, passes, ksteps int, c *float32, load int)
//
// Rows 0–31 of w (row stride ldw bytes) against ntb token blocks of x, k
// steps of 32 columns: for each pair of token blocks (x, x + tbStride; the
// last block alone when ntb is odd, its pair's second half then a copy),
// four 16×16 float32 tiles at c + 4 KiB·pair (row stride 64 bytes): c00
// rows 0–15 × the first block's 16 tokens, c01 rows 0–15 × the second's,
// c10 and c11 rows 16–31. Each k step loads the two 16-row tiles of w
// (w + 64·ks) and, for each of the passes, one 1 KiB VNNI tile of each
// block (consecutive tiles: the passes of step 0, then of step 1, …),
// accumulating the four products. load ≠ 0 starts the sums from c, else
// from zero. The tile state is released before returning.
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
