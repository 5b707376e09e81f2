package cudabackend

import (
	"fmt"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	kcuda "github.com/flextensor-go/flextensor/kernels/cuda"
)

// TestVarlenContigTiles: the packed tile list covers every query row of
// every sequence exactly once in tiles of the given rows (1-token, empty
// and exact-multiple sequences included), the tiles that see the most keys
// first, ties in sequence order; 64 sequences of 512 give 256 tiles, the
// four tiles of each rank together.
func TestVarlenContigTiles(t *testing.T) {
	qStarts := []int32{0, 1, 301, 301, 429, 560} // 1, 300, 0, 128, 131 queries
	got := packedTiles(qStarts, 128)
	// Ends 300 (seq 1 tile 2), 256 (seq 1 tile 1), 131 (seq 4 tile 1),
	// 128 (seq 1 tile 0, seq 3, seq 4 tile 0), 1 (seq 0).
	want := []int32{1, 2, 1, 1, 4, 1, 1, 0, 3, 0, 4, 0, 0, 0}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("tiles %v, want %v", got, want)
	}
	for _, rows := range []int32{64, 128} {
		tiles := packedTiles(qStarts, rows)
		seen := make([]int, qStarts[len(qStarts)-1])
		for i := 0; i < len(tiles); i += 2 {
			s, qt := tiles[i], tiles[i+1]
			n := qStarts[s+1] - qStarts[s]
			if qt*rows >= n {
				t.Fatalf("rows %d: tile %d of sequence %d (%d queries) is empty", rows, qt, s, n)
			}
			for r := qt * rows; r < min(n, qt*rows+rows); r++ {
				seen[qStarts[s]+r]++
			}
		}
		for r, c := range seen {
			if c != 1 {
				t.Errorf("rows %d: query row %d in %d tiles", rows, r, c)
			}
		}
	}
	starts := make([]int32, 65)
	for i := range starts {
		starts[i] = int32(512 * i)
	}
	big := packedTiles(starts, 128)
	if len(big) != 2*256 {
		t.Fatalf("64 × 512: %d tiles, want 256", len(big)/2)
	}
	for i := 0; i < 256; i++ {
		if s, qt := big[2*i], big[2*i+1]; qt != int32(3-i/64) || s != int32(i%64) {
			t.Fatalf("64 × 512: tile %d is (%d, %d), want (%d, %d)", i, s, qt, i%64, 3-i/64)
		}
	}
	if len(packedTiles([]int32{0}, 128)) != 0 || len(packedTiles(nil, 128)) != 0 {
		t.Errorf("no sequences gave tiles")
	}
	// The packed table is the paged one's for fresh sequences (each
	// sequence's length its own rows), and differs once one has a cached
	// prefix.
	for _, st := range [][]int32{qStarts, starts, {0, 7}, {0, 128, 129, 400, 400, 1000}} {
		lens := make([]int32, len(st)-1)
		for s := range lens {
			lens[s] = st[s+1] - st[s]
		}
		for _, rows := range []int32{64, 128} {
			if p, v := packedTiles(st, rows), varlenTiles(st, kernels.PagedKV{SeqLens: lens}, rows); !slices.Equal(p, v) {
				t.Errorf("starts %v rows %d: packed %v, paged %v", st, rows, p, v)
			}
		}
	}
	cached := kernels.PagedKV{SeqLens: []int32{1, 300 + 200, 0, 128, 131}} // sequence 1 after 200 cached
	if p, v := packedTiles(qStarts, 128), varlenTiles(qStarts, cached, 128); slices.Equal(p, v) {
		t.Errorf("a cached prefix left the order unchanged: %v", p)
	}
}

// TestVarlenTiles: the tile list covers every query row once, in tiles of
// the given rows, the tiles that see the most keys first.
func TestVarlenTiles(t *testing.T) {
	kv := kernels.PagedKV{SeqLens: []int32{1, 300, 200, 128}}
	qStarts := []int32{0, 1, 301, 378, 506} // 1, 300, 77 (after 123 cached), 128 queries
	got := varlenTiles(qStarts, kv, 128)
	// Ends 300 (seq 1 tile 2), 256, 200 (seq 2), 128 (seq 1 tile 0), 128 (seq 3), 1.
	want := []int32{1, 2, 1, 1, 2, 0, 1, 0, 3, 0, 0, 0}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("tiles %v, want %v", got, want)
	}
}

// TestVarlenContigKernelNames: wg6 has the packed kernels for head widths
// 64 and 128, declared in the source of its module (SourceSM90a, or its
// extra file if it had one); no other variant names one, and none for
// widths it is not built for.
func TestVarlenContigKernelNames(t *testing.T) {
	for _, v := range prefillVariants {
		for _, d := range []int{32, 64, 128} {
			name := v.contigKernel(d)
			switch {
			case v.name == "wg6" && (d == 64 || d == 128):
				if want := fmt.Sprintf("attn_varlen_contig_prefill_%s_d%d_bf16", v.name, d); name != want {
					t.Errorf("%s d%d: %q, want %q", v.name, d, name, want)
				}
				in := kcuda.KernelsSM90a()
				if v.extra != "" {
					in = kcuda.KernelsSM90aExtra(v.extra)
				}
				if !slices.Contains(in, name) {
					t.Errorf("%s not in the source of its module", name)
				}
			case name != "":
				t.Errorf("%s d%d: packed kernel %q, want none", v.name, d, name)
			}
		}
	}
}

// TestVarlenContigFromEnv: the packed path is on unset and with
// FT_VARLEN_CONTIG=1, off with "0".
func TestVarlenContigFromEnv(t *testing.T) {
	for _, c := range []struct {
		value string
		want  bool
	}{{"", true}, {"0", false}, {"1", true}} {
		t.Setenv("FT_VARLEN_CONTIG", c.value)
		if got := varlenContigFromEnv(); got != c.want {
			t.Errorf("FT_VARLEN_CONTIG=%q: %v, want %v", c.value, got, c.want)
		}
	}
}
