package loader

import (
	"bytes"
	"path/filepath"
	"slices"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestEvict: EvictMapped names each open checkpoint file (and no closed
// one), EvictBytes finds the file of a view of its mapping and not of other
// memory, EvictTensor evicts a tensor's range and refuses unknown names and
// closed files, and the tensors read the same bytes after every eviction
// (the pages fault in again from the file).
func TestEvict(t *testing.T) {
	data := make([]byte, 3*4096+100) // spans several pages, unaligned end
	for i := range data {
		data[i] = byte(i*7 + 3)
	}
	small := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	dir := t.TempDir()
	path := filepath.Join(dir, SingleFileName)
	if err := WriteFile(path, []NamedTensor{
		{Name: "big", DType: runtime.U8, Shape: []int{len(data)}, Data: data},
		{Name: "small", DType: runtime.U8, Shape: []int{len(small)}, Data: small},
	}, nil); err != nil {
		t.Fatal(err)
	}
	c, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		for name, want := range map[string][]byte{"big": data, "small": small} {
			got, err := c.Bytes(name)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: tensor %s's bytes changed", when, name)
			}
		}
	}
	check("before")
	ev, err := EvictMapped()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(ev.Files, path) || ev.Bytes <= 0 {
		t.Fatalf("EvictMapped = %+v; want %s among its files", ev, path)
	}
	check("after EvictMapped")
	big, _ := c.Bytes("big")
	n, ok, err := EvictBytes(big[5000:9000])
	if err != nil || !ok || n != 4000 {
		t.Fatalf("EvictBytes(view) = %d, %v, %v; want 4000, true, nil", n, ok, err)
	}
	if n, ok, err := EvictBytes(data); ok || n != 0 || err != nil {
		t.Fatalf("EvictBytes(Go memory) = %d, %v, %v; want 0, false, nil", n, ok, err)
	}
	check("after EvictBytes")
	if n, err := c.EvictTensor("small"); err != nil || n != int64(len(small)) {
		t.Fatalf("EvictTensor(small) = %d, %v; want %d, nil", n, err, len(small))
	}
	if _, err := c.EvictTensor("nope"); err == nil {
		t.Fatal("EvictTensor(unknown name): no error")
	}
	check("after EvictTensor")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EvictTensor("small"); err == nil {
		t.Fatal("EvictTensor after Close: no error")
	}
	ev, err = EvictMapped()
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(ev.Files, path) {
		t.Fatalf("EvictMapped after Close still names %s", path)
	}
}
