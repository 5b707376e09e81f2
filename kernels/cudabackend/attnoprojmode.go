package cudabackend

import (
	"fmt"
	"strconv"
)

// The switches of the fused one-token attention + o_proj (attnoproj.go,
// issue 21), parsed here without a build tag so that CPU tests cover them.
//
// FT_ATTN_OPROJ: "" or "0" off (the default, not yet measured), "1" on.
// FT_ATTN_OPROJ_MAXCTX: the largest KV-cache capacity the fused op takes
// (default attnOProjMaxCtxDefault, at most attnOProjMaxCtxLimit); above
// it the op declines. FT_ATTN_OPROJ_PREROWS: rows of W_o each block copies
// into shared memory before its attention (default
// attnOProjPreRowsDefault; 0: none; fewer where shared memory is short).

// attnOProjMaxCtxDefault is the default largest KV-cache capacity of the
// fused op; attnOProjMaxCtxLimit the largest FT_ATTN_OPROJ_MAXCTX takes
// (the scores of a block's G ≤ 8 heads live in shared memory).
const (
	attnOProjMaxCtxDefault  = 1024
	attnOProjMaxCtxLimit    = 4096
	attnOProjPreRowsDefault = 128
)

// attnOProjConfig is the parsed switches.
type attnOProjConfig struct {
	on      bool
	maxCtx  int
	preRows int
}

// parseAttnOProj parses the values of FT_ATTN_OPROJ, FT_ATTN_OPROJ_MAXCTX
// and FT_ATTN_OPROJ_PREROWS; an error names the variable and what it takes.
func parseAttnOProj(on, maxCtx, preRows string) (attnOProjConfig, error) {
	c := attnOProjConfig{maxCtx: attnOProjMaxCtxDefault, preRows: attnOProjPreRowsDefault}
	switch on {
	case "", "0":
	case "1":
		c.on = true
	default:
		return c, fmt.Errorf("FT_ATTN_OPROJ=%q: want \"0\" or \"1\" (or unset)", on)
	}
	if maxCtx != "" {
		n, err := strconv.Atoi(maxCtx)
		if err != nil || n < 1 || n > attnOProjMaxCtxLimit {
			return c, fmt.Errorf("FT_ATTN_OPROJ_MAXCTX=%q: want a KV-cache capacity from 1 to %d (or unset: %d)", maxCtx, attnOProjMaxCtxLimit, attnOProjMaxCtxDefault)
		}
		c.maxCtx = n
	}
	if preRows != "" {
		n, err := strconv.Atoi(preRows)
		if err != nil || n < 0 || n > 1<<16 {
			return c, fmt.Errorf("FT_ATTN_OPROJ_PREROWS=%q: want a non-negative number of rows, at most 65536 (or unset: %d)", preRows, attnOProjPreRowsDefault)
		}
		c.preRows = n
	}
	return c, nil
}

// attnOProjSmem is the dynamic shared memory of attn_oproj_g{G}_bf16
// (kernels/cuda/attnoproj.cu) with preRows weight rows and maxL score
// columns: the rows (G·256 bytes each), q, the scores, the warps' partial
// outputs and o, all F32 but the rows.
func attnOProjSmem(G, preRows, maxL int) int {
	return preRows*G*256 + 4*(G*128+G*maxL+8*G*128+G*128)
}

// attnOProjGrid is the grid's chunks of output rows for N rows, K KV heads
// and sms multiprocessors (about one block a multiprocessor, every chunk
// non-empty) and the rows of a chunk.
func attnOProjGrid(N, K, sms int) (chunks, rows int) {
	chunks = max(1, min(N, sms/max(1, K)))
	rows = (N + chunks - 1) / chunks
	return (N + rows - 1) / rows, rows
}

// attnOProjKernels names the fused kernels by query heads per KV head
// (kernels/cuda/attnoproj.cu).
var attnOProjKernels = map[int]string{1: "attn_oproj_g1_bf16", 2: "attn_oproj_g2_bf16", 4: "attn_oproj_g4_bf16", 8: "attn_oproj_g8_bf16"}
