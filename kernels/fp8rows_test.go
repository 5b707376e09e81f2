package kernels

import (
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// rowsFuser is a CPU backend that claims to fuse FP8 rows from 16 tokens.
type rowsFuser struct{ *CPUBackend }

func (rowsFuser) FusesFP8Rows(rows int) bool { return rows >= 16 }

// TestFusesFP8Rows: one token always takes the fused FP8 ops; several only
// on a backend that is an FP8RowsFuser and says so (the CPU is not one).
func TestFusesFP8Rows(t *testing.T) {
	b, err := NewCPUBackend(runtime.NewCPU(0))
	if err != nil {
		t.Fatal(err)
	}
	f := rowsFuser{b}
	for _, c := range []struct {
		b    Backend
		rows int
		want bool
	}{{b, 1, true}, {b, 64, false}, {f, 1, true}, {f, 15, false}, {f, 64, true}} {
		if got := FusesFP8Rows(c.b, c.rows); got != c.want {
			t.Errorf("FusesFP8Rows(%T, %d) = %v, want %v", c.b, c.rows, got, c.want)
		}
	}
}
