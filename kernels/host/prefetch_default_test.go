package host

import (
	"os"
	"testing"
)

// TestPrefetchDefault: the effective prefetch distance of the one-token
// BF16 tile. With FT_HOST_PREFETCH unset and Options.PrefetchBytes 0 it is
// DefaultPrefetchBytes at every level with a prefetching kernel (none at
// Generic or a level without one); FT_HOST_PREFETCH=0 and PrefetchBytes -1
// turn it off; FT_HOST_PREFETCH=N and a positive PrefetchBytes (which wins
// over the environment) set it.
func TestPrefetchDefault(t *testing.T) {
	if DefaultPrefetchBytes != 1024 {
		t.Fatalf("DefaultPrefetchBytes = %d, the measured default is 1024", DefaultPrefetchBytes)
	}
	for _, l := range Levels() {
		hasPF := simdSets[l] != nil && simdSets[l].r4pfBF16 != nil
		on := func(n int) int {
			if hasPF {
				return n
			}
			return 0
		}
		for _, c := range []struct {
			name  string
			env   string // "-": unset
			bytes int
			want  int
		}{
			{"unset", "-", 0, on(DefaultPrefetchBytes)},
			{"empty", "", 0, on(DefaultPrefetchBytes)},
			{"FT_HOST_PREFETCH=0", "0", 0, 0},
			{"PrefetchBytes=-1", "-", -1, 0},
			{"PrefetchBytes=-1 over FT_HOST_PREFETCH=256", "256", -1, 0},
			{"FT_HOST_PREFETCH=256", "256", 0, on(256)},
			{"PrefetchBytes=64 over FT_HOST_PREFETCH=0", "0", 64, on(64)},
		} {
			t.Run(l.String()+"/"+c.name, func(t *testing.T) {
				t.Setenv("FT_HOST_PREFETCH", c.env)
				if c.env == "-" {
					os.Unsetenv("FT_HOST_PREFETCH")
				}
				e, err := NewEngine(Options{Threads: 1, Level: l, PrefetchBytes: c.bytes})
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				if e.prefetch != c.want {
					t.Errorf("prefetch %d bytes, want %d (level has a prefetching kernel: %v)", e.prefetch, c.want, hasPF)
				}
			})
		}
	}
}
