package offload

import (
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime/hostmem"
)

// TestHugePagesTrace: the pinned blocks' huge-page line reports the
// AnonHugePages of the mappings within the blocks unclamped (here past the
// blocks' bytes, as a block's last huge page allows), and the mappings
// reaching beyond the blocks apart, so no 4 KiB-page block hides behind a
// neighbour's huge pages.
func TestHugePagesTrace(t *testing.T) {
	p := hostmem.BlockPages{InRssKiB: 5 << 10, InHugeKiB: 4 << 10, OutRssKiB: 64 << 10, OutHugeKiB: 60 << 10}
	line := hugePagesTrace(3, 3<<20, p)
	t.Log(line)
	if !strings.HasPrefix(line, "pinned: 4.0 of 3.0 MiB on huge pages (3 blocks;") {
		t.Fatalf("%q: want the within-blocks huge pages, 4.0 of 3.0 MiB, unclamped", line)
	}
	if !strings.Contains(line, "Rss 5.0 MiB") || !strings.Contains(line, "beyond them: AnonHugePages 60.0 MiB of Rss 64.0 MiB") {
		t.Fatalf("%q: want the within mappings' Rss and the mappings reaching beyond, apart", line)
	}
	if line := hugePagesTrace(3, 3<<20, hostmem.BlockPages{OutRssKiB: 64 << 10, OutHugeKiB: 64 << 10}); !strings.HasPrefix(line, "pinned: 0.0 of 3.0 MiB") {
		t.Fatalf("%q: huge pages of mappings reaching beyond the blocks counted as the blocks'", line)
	}
}
