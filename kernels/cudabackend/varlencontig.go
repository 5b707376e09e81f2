package cudabackend

import (
	"os"
	"sort"

	"github.com/flextensor-go/flextensor/kernels"
)

// The packed prefill attention of fresh sequences (FT_VARLEN_CONTIG,
// Backend.VarlenContig; kernels.PackedPrefillAttender): when every prefill
// sequence of a batched forward starts at position 0, its keys and values
// are exactly its own packed rows of this forward (k rotated in place by
// the RoPE + store kernel, which still fills the pool for the decode steps
// after), so wg6's varlen kernel reads them as a contiguous cache with a
// (sequence, query tile) table and no block table
// (attn_varlen_contig_prefill_wg6_*, kernels/cuda/sm90a/prefill_wg6.cu).
// Same kernel body, same key order, so the same bits as the paged path.
// This file has no build tag so that the tables (varlenTiles for the paged
// path too) are tested without a GPU.

// varlenContigFromEnv is the default of Backend.VarlenContig: on unless
// FT_VARLEN_CONTIG=0 (New rejects values other than "", "0" and "1"). On
// by default since s11a/s11b: 64 × 512 packed prefill 739.3 and 742.8 ms
// against 748.9 and 748.6 off, interleaved (bench/RESULTS.md).
func varlenContigFromEnv() bool { return os.Getenv("FT_VARLEN_CONTIG") != "0" }

// packedTiles lists the query tiles of rows rows each of the packed
// sequences (sequence s in rows qStarts[s]..qStarts[s+1]−1, all at
// positions from 0) as (sequence, tile) pairs, the tiles that see the most
// keys first (ties in sequence and tile order): varlenTiles with every
// sequence fresh (its length its own rows).
func packedTiles(qStarts []int32, rows int32) []int32 {
	lens := make([]int32, max(len(qStarts)-1, 0))
	for s := range lens {
		lens[s] = qStarts[s+1] - qStarts[s]
	}
	return varlenTiles(qStarts, kernels.PagedKV{SeqLens: lens}, rows)
}

// varlenTiles lists the query tiles of rows rows each of the packed
// sequences as (sequence, tile) pairs, the tiles that see the most keys
// first.
func varlenTiles(qStarts []int32, kv kernels.PagedKV, rows int32) []int32 {
	type tile struct{ seq, qt, end int32 }
	var tiles []tile
	for s := range kv.SeqLens {
		n := qStarts[s+1] - qStarts[s]
		pos := kv.SeqLens[s] - n
		for qt := int32(0); qt*rows < n; qt++ {
			tiles = append(tiles, tile{int32(s), qt, pos + min(n, qt*rows+rows)})
		}
	}
	sort.SliceStable(tiles, func(i, j int) bool { return tiles[i].end > tiles[j].end })
	pairs := make([]int32, 0, 2*len(tiles))
	for _, tl := range tiles {
		pairs = append(pairs, tl.seq, tl.qt)
	}
	return pairs
}
