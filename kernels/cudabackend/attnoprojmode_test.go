package cudabackend

import (
	"slices"
	"strings"
	"testing"

	kcuda "github.com/flextensor-go/flextensor/kernels/cuda"
)

// TestAttnOProjSwitch: FT_ATTN_OPROJ takes "", "0" (off) and "1" (on);
// FT_ATTN_OPROJ_MAXCTX a capacity from 1 to the limit (default 1024);
// FT_ATTN_OPROJ_PREROWS a non-negative row count (default 128); anything
// else is an error naming the variable.
func TestAttnOProjSwitch(t *testing.T) {
	for _, c := range []struct {
		on, maxCtx, pre string
		want            attnOProjConfig
	}{
		{"", "", "", attnOProjConfig{false, attnOProjMaxCtxDefault, attnOProjPreRowsDefault}},
		{"0", "", "", attnOProjConfig{false, attnOProjMaxCtxDefault, attnOProjPreRowsDefault}},
		{"1", "", "", attnOProjConfig{true, attnOProjMaxCtxDefault, attnOProjPreRowsDefault}},
		{"1", "512", "0", attnOProjConfig{true, 512, 0}},
		{"1", "4096", "64", attnOProjConfig{true, 4096, 64}},
	} {
		got, err := parseAttnOProj(c.on, c.maxCtx, c.pre)
		if err != nil || got != c.want {
			t.Errorf("(%q, %q, %q): %+v, %v; want %+v", c.on, c.maxCtx, c.pre, got, err, c.want)
		}
	}
	for _, c := range []struct{ on, maxCtx, pre, name string }{
		{"true", "", "", "FT_ATTN_OPROJ="},
		{"on", "", "", "FT_ATTN_OPROJ="},
		{"1", "0", "", "FT_ATTN_OPROJ_MAXCTX"},
		{"1", "4097", "", "FT_ATTN_OPROJ_MAXCTX"},
		{"1", "1k", "", "FT_ATTN_OPROJ_MAXCTX"},
		{"1", "", "-1", "FT_ATTN_OPROJ_PREROWS"},
		{"1", "", "x", "FT_ATTN_OPROJ_PREROWS"},
	} {
		if _, err := parseAttnOProj(c.on, c.maxCtx, c.pre); err == nil || !strings.Contains(err.Error(), c.name) {
			t.Errorf("(%q, %q, %q): error %v, want one naming %s", c.on, c.maxCtx, c.pre, err, c.name)
		}
	}
	for _, v := range []string{"", "0", "1"} {
		if err := checkEnvSwitch("FT_ATTN_OPROJ", v); err != nil {
			t.Errorf("start-up check of FT_ATTN_OPROJ=%q: %v", v, err)
		}
	}
	if err := checkEnvSwitch("FT_ATTN_OPROJ", "yes"); err == nil {
		t.Error("start-up check of FT_ATTN_OPROJ=yes: no error")
	}
}

// TestAttnOProjGrid: the grid covers every output row once with non-empty
// chunks, about one block a multiprocessor, and the shared memory grows
// with the rows and the context as the kernel lays it out.
func TestAttnOProjGrid(t *testing.T) {
	for _, c := range []struct{ N, K, sms int }{{4096, 8, 132}, {4096, 8, 8}, {64, 2, 132}, {5, 8, 132}, {100, 1, 132}, {7, 200, 132}} {
		chunks, rows := attnOProjGrid(c.N, c.K, c.sms)
		if chunks < 1 || rows < 1 || (chunks-1)*rows >= c.N || chunks*rows < c.N {
			t.Errorf("N %d K %d: %d chunks of %d rows do not cover the rows with non-empty chunks", c.N, c.K, chunks, rows)
		}
		if chunks*c.K > max(c.sms, c.K) {
			t.Errorf("N %d K %d: %d blocks on %d multiprocessors", c.N, c.K, chunks*c.K, c.sms)
		}
	}
	if got := attnOProjSmem(4, 0, 512); got != 4*(512+4*512+8*512+512) {
		t.Errorf("smem at G 4, no rows, 512 positions: %d", got)
	}
	if attnOProjSmem(4, 10, 512)-attnOProjSmem(4, 0, 512) != 10*1024 {
		t.Error("a row of G 4 is not 1,024 bytes of shared memory")
	}
}

// TestAttnOProjKernelNames: every fused kernel the backend loads is in the
// compiled source.
func TestAttnOProjKernelNames(t *testing.T) {
	names := kcuda.Kernels()
	for G, name := range attnOProjKernels {
		if !slices.Contains(names, name) {
			t.Errorf("G %d: %s is not a kernel of the source", G, name)
		}
	}
}
