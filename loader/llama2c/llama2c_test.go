package llama2c

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConvertOverflowingHeader: a header whose byte count overflows int64
// (2^62+1024 floats, which 4· wraps to 4096 bytes) is refused with an error,
// even when the file's size matches the wrapped byte count, instead of
// slicing past the data; a header whose float count itself overflows is
// refused by Floats.
func TestConvertOverflowingHeader(t *testing.T) {
	hdr := []int32{1 << 20, 524287, 1 << 20, 1024, 256, 1<<20 - 1, 1}
	b := make([]byte, 4124)
	for i, v := range hdr {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	p := filepath.Join(t.TempDir(), "crafted.bin")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Convert(p, t.TempDir(), Options{})
	if err == nil || !strings.Contains(err.Error(), "needs 28 + 4·4611686018427388928") {
		t.Fatalf("error %v, want one giving the float count the header needs", err)
	}
	// ParseHeader's caps keep Floats within int64; a Header built past
	// them overflows and Floats says where.
	big := Header{Dim: 1 << 30, HiddenDim: 1 << 30, Layers: 1 << 20, Heads: 1, KVHeads: 1, Vocab: 1, SeqLen: 1}
	if _, err := big.Floats(); err == nil || !strings.Contains(err.Error(), "n_layers × dim × dim") {
		t.Errorf("Floats: error %v, want one naming n_layers × dim × dim", err)
	}
	// A small header's count is exact: 4 layers of dim 8 etc.
	small := Header{Dim: 8, HiddenDim: 16, Layers: 2, Heads: 2, KVHeads: 1, Vocab: 10, SeqLen: 4, Shared: true}
	n, err := small.Floats()
	kv := int64(1 * 4)
	want := int64(10*8 + 2*8 + 2*8*8 + 2*2*kv*8 + 2*8*8 + 2*8 + 3*2*16*8 + 8 + 4*4)
	if err != nil || n != want {
		t.Errorf("Floats = %d, %v; want %d", n, err, want)
	}
}
