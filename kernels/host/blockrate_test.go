package host

import (
	"hash/crc32"
	"math"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestRateHostBlock: a block of at least 32 MiB (here starting one byte
// past an aligned address) is read, not skipped: its rate is at least its
// bytes over the call's wall time and below 10 TB/s (a read that did not
// happen would be far faster), and its bytes are unchanged; a smaller
// block gets 0 (not rated); a nil backend is an error.
func TestRateHostBlock(t *testing.T) {
	b, err := New(runtime.NewCPU(0), Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	mem := make([]byte, rateMinBytes+64)
	for i := range mem {
		mem[i] = byte(i*7 + i>>12)
	}
	data := mem[1 : rateMinBytes+9]
	sum := crc32.ChecksumIEEE(data)
	t0 := time.Now()
	bps, err := b.RateHostBlock(data)
	wall := time.Since(t0).Seconds()
	if err != nil {
		t.Fatal(err)
	}
	if floor := float64(rateMinBytes) / wall; !(bps >= floor) || bps > 10e12 || math.IsInf(bps, 0) {
		t.Fatalf("rate %.3g bytes/s; want between %.3g (its bytes over the call's %.3g s) and 1e13", bps, floor, wall)
	}
	if crc32.ChecksumIEEE(data) != sum {
		t.Fatal("RateHostBlock changed the block's bytes")
	}
	if bps, err := b.RateHostBlock(mem[:rateMinBytes-1]); err != nil || bps != 0 {
		t.Fatalf("a block of %d bytes: %v, %v; want 0 (too small to rate)", rateMinBytes-1, bps, err)
	}
	if bps, err := b.RateHostBlock(nil); err != nil || bps != 0 {
		t.Fatalf("no bytes: %v, %v; want 0", bps, err)
	}
	var nb *Backend
	if _, err := nb.RateHostBlock(data); err == nil {
		t.Fatal("nil backend: no error")
	}
}
