package loader

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// FuzzShardIndex feeds arbitrary bytes as model.safetensors.index.json to
// OpenCheckpoint, in a directory that holds three real shards (those of
// TestRoundTripWriteSharded) and a model.safetensors with the same tensors.
// It must not panic; an accepted index must give a checkpoint whose tensors
// are exactly the index's weight_map, each read from a file inside the
// directory with the bytes that were written for it. The seed corpus is in
// testdata/fuzz/FuzzShardIndex.
func FuzzShardIndex(f *testing.F) {
	tensors := randomTensors(2)
	want := make(map[string][]byte, len(tensors))
	for _, nt := range tensors {
		want[nt.Name] = nt.Data
	}
	dir := f.TempDir()
	if err := WriteSharded(dir, tensors, 1500); err != nil {
		f.Fatal(err)
	}
	if err := WriteFile(filepath.Join(dir, SingleFileName), tensors, nil); err != nil {
		f.Fatal(err)
	}
	index, err := os.ReadFile(filepath.Join(dir, IndexFileName))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(index)
	absDir, err := filepath.Abs(dir)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, IndexFileName), data, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := OpenCheckpoint(dir)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		defer c.Close()
		// Accepted: the index is a JSON object whose weight_map decides the tensors.
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(data, &idx); err != nil {
			t.Fatalf("accepted an index that does not decode: %v", err)
		}
		var names []string
		for n := range idx.WeightMap {
			names = append(names, n)
		}
		slices.Sort(names)
		if got := c.Names(); len(got) == 0 || !slices.Equal(got, names) {
			t.Fatalf("Names = %q, weight_map has %q", got, names)
		}
		files := c.Files()
		if !slices.IsSorted(files) || len(slices.Compact(slices.Clone(files))) != len(files) {
			t.Fatalf("Files = %q: not sorted and distinct", files)
		}
		var total int64
		for _, n := range names {
			info, err := c.Info(n)
			if err != nil {
				t.Fatalf("listed tensor %q: %v", n, err)
			}
			abs, err := filepath.Abs(info.File)
			if err != nil || !strings.HasPrefix(abs, absDir+string(filepath.Separator)) {
				t.Fatalf("tensor %q is read from %s, outside %s", n, info.File, dir)
			}
			if !slices.Contains(files, info.File) {
				t.Fatalf("tensor %q is in %s, which Files (%q) does not list", n, info.File, files)
			}
			w, ok := want[n]
			if !ok {
				t.Fatalf("accepted tensor %q, which no file holds", n)
			}
			b, err := c.Bytes(n)
			if err != nil || !bytes.Equal(b, w) {
				t.Fatalf("tensor %q: Bytes gave %d bytes (%v), not what was written", n, len(b), err)
			}
			dst := make([]byte, len(w))
			if err := c.ReadAt(n, dst, 0); err != nil || !bytes.Equal(dst, w) {
				t.Fatalf("tensor %q: ReadAt disagrees with what was written: %v", n, err)
			}
			total += info.Size
		}
		if c.TotalBytes() != total {
			t.Fatalf("TotalBytes = %d, tensors sum to %d", c.TotalBytes(), total)
		}
		if c.BytesRead() != total {
			t.Fatalf("BytesRead = %d after reading %d bytes", c.BytesRead(), total)
		}
	})
}
